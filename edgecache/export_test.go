package edgecache

// JPEGFallback is jpegFallback, for the benchmark.
var JPEGFallback = jpegFallback
