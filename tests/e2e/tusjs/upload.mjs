// tus-js-client (npm, unmodified) uploading one file to Coffer, for tests/e2e/test_tus_clients.py.
// Usage: node upload.mjs '<json>' with {endpoint, file, chunkSize, headers, metadata, uploadUrl}.
// Prints one JSON object per line: {"url"} once created, {"offset"} after each chunk, then
// {"assetId", "offset"} on success or {"error"} (exit 1).
import { readFileSync } from 'node:fs'
import { Upload } from 'tus-js-client'

const options = JSON.parse(process.argv[2])
const data = readFileSync(options.file)
const say = (message) => process.stdout.write(JSON.stringify(message) + '\n')

const upload = new Upload(data, {
  endpoint: options.endpoint,
  uploadUrl: options.uploadUrl || null,
  chunkSize: options.chunkSize,
  headers: options.headers || {},
  metadata: options.metadata || {},
  retryDelays: [100, 300, 1000],
  onUploadUrlAvailable: () => say({ url: upload.url }),
  onChunkComplete: (_size, accepted) => say({ offset: accepted }),
  onSuccess: ({ lastResponse }) => {
    say({ assetId: lastResponse.getHeader('Coffer-Asset-Id'), offset: data.length })
  },
  onError: (error) => {
    say({ error: String(error) })
    process.exit(1)
  },
})
upload.start()
