// A sample JWT issuer for trying the policies locally: it serves its JWKS and mints tokens.
//   GET /.well-known/jwks.json   the public key set (what a RequestAuthentication's jwksUri names)
//   GET /token?sub=alice&groups=admins,dev&scope=read,write&exp=1h&claim.team=blue&nbf=-5m
//                                 a signed RS256 token (exp and nbf are offsets from now)
// The key pair is kept in a state file so that tokens survive a restart of the issuer.
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';
import { exportJWK, generateKeyPair, importJWK, SignJWT, type JWK } from 'jose';
import { parseDuration } from '../../src/common/duration.js';

export interface IssuerKey {
  kid: string;
  publicJwk: JWK;
  privateJwk: JWK;
}

export async function loadOrCreateKey(stateFile: string): Promise<IssuerKey> {
  if (existsSync(stateFile)) return JSON.parse(readFileSync(stateFile, 'utf8')) as IssuerKey;
  const { publicKey, privateKey } = await generateKeyPair('RS256', { extractable: true });
  const kid = `sample-${Date.now().toString(36)}`;
  const key: IssuerKey = {
    kid,
    publicJwk: { ...(await exportJWK(publicKey)), kid, alg: 'RS256', use: 'sig' },
    privateJwk: { ...(await exportJWK(privateKey)), kid, alg: 'RS256' },
  };
  mkdirSync(dirname(stateFile), { recursive: true });
  writeFileSync(stateFile, JSON.stringify(key), { mode: 0o600 });
  return key;
}

const LIST_CLAIMS = ['groups', 'scope'];

/** Seconds from now for a Go duration such as `1h` or `-5m`. */
function offset(text: string): number {
  return Math.floor(Date.now() / 1000) + Number(parseDuration(text) / 1_000_000_000n);
}

export async function mint(key: IssuerKey, issuer: string, params: URLSearchParams): Promise<string> {
  const claims: Record<string, unknown> = {};
  for (const name of LIST_CLAIMS) {
    const v = params.get(name);
    if (v !== null) claims[name] = v.split(',').filter(Boolean);
  }
  for (const [k, v] of params) if (k.startsWith('claim.')) claims[k.slice('claim.'.length)] = v;
  const jwt = new SignJWT(claims)
    .setProtectedHeader({ alg: 'RS256', kid: key.kid, typ: 'JWT' })
    .setIssuer(params.get('iss') ?? issuer)
    .setSubject(params.get('sub') ?? 'sample-user')
    .setIssuedAt()
    .setExpirationTime(offset(params.get('exp') ?? '1h'));
  const nbf = params.get('nbf');
  if (nbf !== null) jwt.setNotBefore(offset(nbf));
  const aud = params.get('aud');
  if (aud !== null) jwt.setAudience(aud.split(','));
  return jwt.sign(await importJWK(key.privateJwk, 'RS256'));
}

export function issuerServer(key: IssuerKey, issuer: () => string): Server {
  return createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://issuer');
    if (url.pathname === '/.well-known/jwks.json') {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ keys: [key.publicJwk] }));
      return;
    }
    if (url.pathname === '/token') {
      mint(key, issuer(), url.searchParams).then(
        (token) => res.writeHead(200, { 'content-type': 'text/plain' }).end(token + '\n'),
        (e: Error) => res.writeHead(400, { 'content-type': 'text/plain' }).end(`cannot mint: ${e.message}\n`),
      );
      return;
    }
    res.writeHead(404, { 'content-type': 'text/plain' }).end('endpoints: /.well-known/jwks.json, /token?sub=&groups=&scope=&exp=&nbf=&aud=&iss=&claim.<name>=\n');
  });
}

export async function startIssuer(stateFile: string, port: number, host = '127.0.0.1'): Promise<{ server: Server; address: AddressInfo; issuer: string }> {
  const key = await loadOrCreateKey(stateFile);
  let issuer = '';
  const server = issuerServer(key, () => issuer);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, resolve);
  });
  const address = server.address() as AddressInfo;
  issuer = `http://${host}:${address.port}`;
  return { server, address, issuer };
}
