// Package web holds the stock HTTP upload clients Willow is tested with and
// those tests: tus-js-client (pinned in package.json, installed into
// node_modules by scripts/setup.sh with npm ci) driven under Node by
// tus/upload.mjs, and a client sending what Apple's URLSession sends for
// the IETF resumable-upload draft, each against a live one-box cluster
// (package cluster). The master console's upload page, which vendors
// tus-js-client's browser build, is tested in headless Chromium here too.
package web
