// Regenerates golden.json: an execute body and the manifest a Code API deployment would sign for it,
// computed independently of codellm's Go code (JavaScript's own JSON.stringify and key sort, Node's
// Ed25519). Run: node internal/execmanifest/testdata/gen_golden.mjs > internal/execmanifest/testdata/golden.json
import crypto from 'node:crypto';

const canonical = (v) => {
  if (Array.isArray(v)) return `[${v.map(canonical).join(',')}]`;
  if (v !== null && typeof v === 'object') {
    return `{${Object.keys(v).sort().map((k) => `${JSON.stringify(k)}:${canonical(v[k])}`).join(',')}}`;
  }
  return JSON.stringify(v);
};
const seed = Buffer.alloc(32, 7); // a fixed test key: never a deployment's
const priv = crypto.createPrivateKey({
  key: Buffer.concat([Buffer.from('302e020100300506032b657004220420', 'hex'), seed]),
  format: 'der', type: 'pkcs8',
});
const pubDer = crypto.createPublicKey(priv).export({ format: 'der', type: 'spki' });
const body = {
  language: 'python', version: '*', run_timeout: 30000, run_cpu_time: 1.5,
  files: [
    { name: 'main.py', content: 'print(open("data.csv").read())' },
    { id: 'obj-data', storage_session_id: 'sess-in', name: 'data.csv' },
    { id: 'obj-notes', storage_session_id: 'sess-prev', name: 'notes/ré.txt' },
  ],
  session_id: 'exec-1', output_session_id: 'sess-out', egress_grant: 'grant-opaque',
  metadata: { '\u{1F600}k': 1, '\uFF61k': 2 },
};
const claims = {
  v: 1, exec_id: 'exec-1', tenant_id: 'tenant-a', user_id: 'user-1', session_key: 'sk-1',
  input_files: [
    { id: 'obj-notes', session_id: 'sess-prev', name: 'notes/ré.txt' },
    { id: 'obj-data', session_id: 'sess-in', name: 'data.csv' },
  ],
  read_sessions: ['sess-prev', 'sess-in'], output_session_id: 'sess-out',
  max_upload_bytes: 1048576, max_output_files: 4, max_requests: 16,
  iat: 1764900000, exp: 1764900600,
  execute_body_sha256: crypto.createHash('sha256').update(canonical(body)).digest('base64url'),
};
const payload = canonical(claims);
const token = `${Buffer.from(payload).toString('base64url')}.${crypto.sign(null, Buffer.from(payload), priv).toString('base64url')}`;
process.stdout.write(JSON.stringify({
  public_key_base64_der: pubDer.toString('base64'),
  public_key_pem: crypto.createPublicKey(priv).export({ format: 'pem', type: 'spki' }),
  now: 1764900100, body, body_sha256: claims.execute_body_sha256, payload, token,
}, null, 2) + '\n');
