// bench.mjs drives the stock tus-js-client (pinned in web/package.json)
// under Node for the upload benchmark (upload/tusd_bench_test.go): one
// client, several tus servers, the same files. Its JSON argument is a plan,
// run in order:
//
//   {"servers": [{"name", "endpoint", "tokens": [T...], "metadata": {...}}],
//    "files": [{"path", "filetype", "sha256"}],
//    "runs": [{"server": I, "file": J, "concurrency": C, "uploads": K, "tag"}]}
//
// A run starts C workers that each upload file J K times in a row to server
// I (worker w sends tokens[w % len] as a bearer token and a fresh upload_id
// in its metadata), and prints one JSON line when all are done:
//
//   {"tag", "server", "file", "concurrency", "uploads", "bytes", "seconds"}
//
// The files are read into memory before the first run; only the uploads
// are timed. A failed upload prints {"error": M} and exits 1.
import fs from 'node:fs'
import * as tus from 'tus-js-client'

const plan = JSON.parse(process.argv[2])
const data = plan.files.map((f) => fs.readFileSync(f.path))
let seq = 0

function uploadOnce(srv, fi, worker) {
  const f = plan.files[fi]
  const id = `bench-${process.pid}-${seq++}`
  const metadata = { filetype: f.filetype, filename: id, ...(srv.metadata || {}) }
  if (srv.willow) {
    metadata.upload_id = id
    metadata.sha256 = f.sha256 // verified by the front at commit
  }
  const headers = {}
  if (srv.tokens && srv.tokens.length) {
    headers.Authorization = 'Bearer ' + srv.tokens[worker % srv.tokens.length]
  }
  return new Promise((resolve, reject) => {
    const up = new tus.Upload(data[fi], {
      endpoint: srv.endpoint,
      headers,
      metadata,
      chunkSize: Infinity,
      retryDelays: [],
      onSuccess: () => resolve(),
      onError: (err) => reject(err),
    })
    up.start()
  })
}

for (const run of plan.runs) {
  const srv = plan.servers[run.server]
  const t0 = process.hrtime.bigint()
  const workers = []
  for (let w = 0; w < run.concurrency; w++) {
    workers.push((async () => {
      for (let k = 0; k < run.uploads; k++) await uploadOnce(srv, run.file, w)
    })())
  }
  try {
    await Promise.all(workers)
  } catch (err) {
    process.stdout.write(JSON.stringify({ error: `${srv.name}: ${String(err.message).slice(0, 500)}` }) + '\n')
    process.exit(1)
  }
  const seconds = Number(process.hrtime.bigint() - t0) / 1e9
  const n = run.concurrency * run.uploads
  process.stdout.write(JSON.stringify({
    tag: run.tag, server: srv.name, file: run.file, concurrency: run.concurrency,
    uploads: n, bytes: n * data[run.file].length, seconds,
  }) + '\n')
}
