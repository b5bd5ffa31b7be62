// upload.mjs drives the stock tus-js-client (pinned in web/package.json)
// under Node for the Go tests in web/: one upload, described by a JSON
// argument, reported as one JSON object per line on stdout:
//
//   {"event":"chunk","accepted":N}            after each acknowledged request
//   {"event":"retry","attempt":N,"status":S}  when the client decides to retry
//   {"event":"aborted","url":U,"accepted":N}  after abortAfterBytes
//   {"event":"success","url":U,"mediaId":ID,"location":L,"region":R}
//   {"event":"error","status":S,"body":B,"retryAfter":RA,"message":M}
//
// Options: file, endpoint | uploadUrl, token, metadata, headers, chunkSize,
// retryDelays, uploadDataDuringCreation, abortAfterBytes.
import fs from 'node:fs'
import * as tus from 'tus-js-client'

const opt = JSON.parse(process.argv[2])
const data = fs.readFileSync(opt.file)
const emit = (o) => process.stdout.write(JSON.stringify(o) + '\n')
const resp = (err) => (err && err.originalResponse) || null

const upload = new tus.Upload(data, {
  endpoint: opt.endpoint || null,
  uploadUrl: opt.uploadUrl || null,
  headers: { Authorization: 'Bearer ' + opt.token, ...(opt.headers || {}) },
  metadata: opt.metadata || {},
  chunkSize: opt.chunkSize || Infinity,
  retryDelays: opt.retryDelays === undefined ? [0, 200, 500, 1000] : opt.retryDelays,
  uploadDataDuringCreation: !!opt.uploadDataDuringCreation,
  onChunkComplete(chunkSize, accepted) {
    emit({ event: 'chunk', accepted })
    if (opt.abortAfterBytes && accepted >= opt.abortAfterBytes) {
      upload.abort().then(() => emit({ event: 'aborted', url: upload.url, accepted }))
    }
  },
  onShouldRetry(err, attempt) {
    const r = resp(err)
    const status = r ? r.getStatus() : 0
    emit({ event: 'retry', attempt, status, message: String(err.message).slice(0, 300) })
    // The client's default rule: retry unless a 4xx other than 409/423.
    return !(status >= 400 && status < 500) || status === 409 || status === 423
  },
  onSuccess({ lastResponse }) {
    emit({
      event: 'success', url: upload.url,
      mediaId: lastResponse.getHeader('Willow-Media-Id'),
      location: lastResponse.getHeader('Willow-Media-Location'),
      region: lastResponse.getHeader('Willow-Media-Region'),
    })
  },
  onError(err) {
    const r = resp(err)
    emit({
      event: 'error', status: r ? r.getStatus() : 0, body: r ? r.getBody() : '',
      retryAfter: r ? r.getHeader('Retry-After') : null, url: upload.url,
      message: String(err.message).slice(0, 500),
    })
    process.exitCode = 1
  },
})
upload.start()
