// tus-node-server for bench/peers/specialists.py: @tus/server with @tus/file-store, as the
// tus project's README sets them up, on 127.0.0.1:PORT, storing under DIR.
//   node server.mjs PORT DIR
import http from 'node:http'
import {Server} from '@tus/server'
import {FileStore} from '@tus/file-store'

const [port, directory] = process.argv.slice(2)
const tus = new Server({path: '/files', datastore: new FileStore({directory})})
http.createServer((req, res) => tus.handle(req, res)).listen(Number(port), '127.0.0.1')
