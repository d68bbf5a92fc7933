// codellm's fetch-through-the-egress-proxy preload for Node < 22.21 (and 23), whose fetch ignores
// HTTP(S)_PROXY. The sandbox loads it with NODE_OPTIONS=--import=data:… when a block has an egress proxy.
// It only changes how fetch reaches a destination: through an HTTP CONNECT tunnel to the proxy named by
// HTTPS_PROXY / HTTP_PROXY at connect time. It cannot widen anything: the block's network namespace has
// no route out, and the proxy applies the allow-list to every tunnel. Any failure leaves fetch as it was.
// net and tls load on the first fetch only: importing tls at every node start costs tens of ms.
let net, tls;
const modules = () => net ? Promise.resolve() :
  Promise.all([import('node:net'), import('node:tls')]).then(([n, t]) => { net = n.default; tls = t.default; });

const [major, minor] = process.versions.node.split('.').map(Number);
const native = major >= 24 || (major === 22 && minor >= 21); // NODE_USE_ENV_PROXY (set by codellm) works
const key = Symbol.for('undici.globalDispatcher.1');

function proxyFor(protocol) {
  const v = protocol === 'https:' ? process.env.HTTPS_PROXY || process.env.https_proxy
    : process.env.HTTP_PROXY || process.env.http_proxy;
  try { return v ? new URL(v) : null; } catch { return null; }
}

// tunnel opens host:port through the proxy with CONNECT, then TLS for https.
function tunnel(opts, proxy, cb) {
  const https = opts.protocol === 'https:';
  const host = opts.hostname, port = opts.port || (https ? 443 : 80);
  const authority = (host.includes(':') && !host.startsWith('[') ? `[${host}]` : host) + ':' + port;
  const sock = net.connect(Number(proxy.port) || 80, proxy.hostname);
  let head = Buffer.alloc(0), done = false;
  const fail = (e) => { if (!done) { done = true; sock.destroy(); cb(e); } };
  sock.once('error', fail);
  sock.once('connect', () => sock.write(`CONNECT ${authority} HTTP/1.1\r\nHost: ${authority}\r\n\r\n`));
  const onData = (d) => {
    head = Buffer.concat([head, d]);
    const end = head.indexOf('\r\n\r\n');
    if (end < 0) { if (head.length > 65536) fail(new Error('egress proxy: reply head too large')); return; }
    sock.removeListener('data', onData);
    const status = head.subarray(0, head.indexOf('\r\n')).toString();
    if (!/^HTTP\/1\.[01] 200/.test(status)) {
      const reason = head.subarray(end + 4).toString().trim();
      return fail(new Error(`egress proxy refused ${authority}: ${status}${reason ? ' ' + reason : ''}`));
    }
    sock.removeListener('error', fail);
    done = true;
    if (!https) return cb(null, sock);
    const t = tls.connect({ socket: sock, servername: opts.servername || (net.isIP(host) ? undefined : host),
      ALPNProtocols: ['http/1.1'] });
    t.once('secureConnect', () => { t.removeListener('error', cb); cb(null, t); });
    t.once('error', cb);
  };
  sock.on('data', onData);
}

// direct is what fetch does without a proxy variable (the namespace has no route, so it fails as before).
function direct(opts, cb) {
  const https = opts.protocol === 'https:';
  const port = Number(opts.port) || (https ? 443 : 80);
  const s = https ? tls.connect({ host: opts.hostname, port, servername: opts.servername || opts.hostname, ALPNProtocols: ['http/1.1'] })
    : net.connect(port, opts.hostname);
  s.once(https ? 'secureConnect' : 'connect', () => { s.removeListener('error', cb); cb(null, s); });
  s.once('error', cb);
}

// install swaps undici's global dispatcher for an Agent of the same class that tunnels. It runs on the
// first fetch call, so a node process that never fetches never loads undici.
let installed = false;
function install(orig) {
  if (installed) return;
  installed = true;
  try {
    void orig('data:,'); // makes undici create its global Agent, whose class fetch's own Agent is
    const Agent = globalThis[key] && globalThis[key].constructor;
    if (typeof Agent === 'function') {
      globalThis[key] = new Agent({
        connect(opts, cb) {
          modules().then(() => {
            const proxy = proxyFor(opts.protocol);
            return proxy ? tunnel(opts, proxy, cb) : direct(opts, cb);
          }, cb);
        },
      });
    }
  } catch { /* leave fetch as it is */ }
}

if (!native && typeof globalThis.fetch === 'function') {
  const orig = globalThis.fetch;
  globalThis.fetch = function fetch(input, init) {
    install(orig);
    return orig.call(this, input, init);
  };
}
