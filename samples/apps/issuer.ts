// A sample JWT issuer for trying the policies locally: it serves its JWKS and mints tokens.
//   GET /.well-known/jwks.json   the public key set (what a RequestAuthentication's jwksUri names)
//   GET /.well-known/openid-configuration   OIDC discovery ({issuer, jwks_uri}); the mesh CA finds
//                                 the key set of TOKEN_ISSUER this way
//   GET /token?sub=alice&groups=admins,dev&scope=read,write&exp=1h&claim.team=blue&nbf=-5m
//                                 a signed RS256 token (exp and nbf are offsets from now)
//   POST /rotate                  key rotation: a new key pair signs from now on; the JWKS serves
//                                 the new public key and the previous one (tokens already issued
//                                 stay valid); answers the new kid
//   GET /stats                    {"jwksRequests": n}: how often the JWKS was fetched
// The key pairs are kept in a state file so that tokens survive a restart of the issuer.
import { createServer, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { existsSync, mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { dirname } from 'node:path';
import { exportJWK, generateKeyPair, importJWK, SignJWT, type JWK } from 'jose';
import { parseDuration } from '../../src/common/duration.js';

export interface IssuerKey {
  /** The signing key. */
  kid: string;
  publicJwk: JWK;
  privateJwk: JWK;
  /** Public keys of earlier signing keys still published (the last one before a rotation). */
  previous?: JWK[];
}

async function newKey(): Promise<Omit<IssuerKey, 'previous'>> {
  const { publicKey, privateKey } = await generateKeyPair('RS256', { extractable: true });
  // Two rotations within a millisecond must still get distinct kids.
  const kid = `sample-${Date.now().toString(36)}-${randomBytes(3).toString('hex')}`;
  return {
    kid,
    publicJwk: { ...(await exportJWK(publicKey)), kid, alg: 'RS256', use: 'sig' },
    privateJwk: { ...(await exportJWK(privateKey)), kid, alg: 'RS256' },
  };
}

function saveKey(stateFile: string, key: IssuerKey): void {
  mkdirSync(dirname(stateFile), { recursive: true });
  writeFileSync(stateFile, JSON.stringify(key), { mode: 0o600 });
}

export async function loadOrCreateKey(stateFile: string): Promise<IssuerKey> {
  if (existsSync(stateFile)) return JSON.parse(readFileSync(stateFile, 'utf8')) as IssuerKey;
  const key = await newKey();
  saveKey(stateFile, key);
  return key;
}

/** The public keys the JWKS serves: the signing key first, then the previous one. */
export function publicKeys(key: IssuerKey): JWK[] {
  return [key.publicJwk, ...(key.previous ?? [])];
}

/**
 * A new signing key; the old public key stays published (only the last one: older keys go), and
 * the state file is rewritten when given, so a restarted issuer keeps both.
 */
export async function rotateKey(key: IssuerKey, stateFile?: string): Promise<IssuerKey> {
  const rotated: IssuerKey = { ...(await newKey()), previous: [key.publicJwk] };
  if (stateFile !== undefined) saveKey(stateFile, rotated);
  return rotated;
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

export interface IssuerServerOptions {
  /** Where a rotated key is saved (see loadOrCreateKey). */
  readonly stateFile?: string;
}

export function issuerServer(initial: IssuerKey, issuer: () => string, opts: IssuerServerOptions = {}): Server {
  let key = initial;
  let jwksRequests = 0;
  const text = (res: ServerResponse, code: number, body: string) => res.writeHead(code, { 'content-type': 'text/plain' }).end(body);
  return createServer((req, res) => {
    const url = new URL(req.url ?? '/', 'http://issuer');
    if (url.pathname === '/.well-known/jwks.json') {
      jwksRequests++;
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ keys: publicKeys(key) }));
      return;
    }
    if (url.pathname === '/.well-known/openid-configuration') {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ issuer: issuer(), jwks_uri: `${issuer()}/.well-known/jwks.json` }));
      return;
    }
    if (url.pathname === '/token') {
      mint(key, issuer(), url.searchParams).then(
        (token) => text(res, 200, token + '\n'),
        (e: Error) => text(res, 400, `cannot mint: ${e.message}\n`),
      );
      return;
    }
    if (url.pathname === '/rotate') {
      if (req.method !== 'POST') {
        text(res, 405, 'POST /rotate\n');
        return;
      }
      rotateKey(key, opts.stateFile).then(
        (rotated) => {
          key = rotated;
          text(res, 200, `${rotated.kid}\n`);
        },
        (e: Error) => text(res, 500, `cannot rotate: ${e.message}\n`),
      );
      return;
    }
    if (url.pathname === '/stats') {
      res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ jwksRequests }));
      return;
    }
    text(res, 404, 'endpoints: /.well-known/jwks.json, /.well-known/openid-configuration, /token?sub=&groups=&scope=&exp=&nbf=&aud=&iss=&claim.<name>=, POST /rotate, /stats\n');
  });
}

export async function startIssuer(stateFile: string, port: number, host = '127.0.0.1'): Promise<{ server: Server; address: AddressInfo; issuer: string }> {
  const key = await loadOrCreateKey(stateFile);
  let issuer = '';
  const server = issuerServer(key, () => issuer, { stateFile });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, resolve);
  });
  const address = server.address() as AddressInfo;
  issuer = `http://${host}:${address.port}`;
  return { server, address, issuer };
}
