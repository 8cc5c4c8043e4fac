// Every row of the decision table (jwt-policies.md) against real processes, in the order a user
// meets them: pilot-discovery on a config directory, pilot-agent with its mesh-proxy in front of
// the httpbin app, the sample issuer; policies are files saved into the config directory.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateKeyPair, SignJWT } from 'jose';
import { freePorts, startLocalMesh, type LocalMesh } from '../../samples/local-mesh.js';
import { eventually, REPO_ROOT } from '../helpers/proc.js';

const policyFile = (name: string) => join(REPO_ROOT, 'samples', 'policies', name);

test('the decision table holds against real processes', { timeout: 180_000 }, async () => {
  const state = mkdtempSync(join(tmpdir(), 'mesh-local-'));
  const mesh: LocalMesh = await startLocalMesh({ stateDir: state, issuer: true, ports: await freePorts(), output: 'pipe' });
  const issuer = mesh.issuerUrl!;
  const inbound = `http://127.0.0.1:${mesh.ports.inbound}/headers`;
  const status = async (token?: string) => {
    const res = await fetch(inbound, token === undefined ? {} : { headers: { authorization: `Bearer ${token}` } });
    await res.body?.cancel();
    return res.status;
  };
  /** Waits until the proxy answers `expected` (config reaches it asynchronously after a save). */
  const expectStatus = (expected: number, token?: string, why = '') =>
    eventually(async () => assert.equal(await status(token), expected, `${why} (token: ${token === undefined ? 'none' : token.slice(0, 16)})`), 20_000);
  const mint = async (q: string) => (await (await fetch(`${issuer}/token?${q}`)).text()).trim();
  const save = (name: string, text: string) => writeFileSync(join(mesh.configDir, name), text);
  const policyWith = (name: string) => readFileSync(policyFile(name), 'utf8').replaceAll('http://127.0.0.1:8899', issuer);
  try {
    // Rule 1: a RequestAuthentication selects the workload and the token does not validate: 401.
    await expectStatus(401, 'not-a-jwt', 'rule 1: a malformed token');
    const res401 = await fetch(inbound, { headers: { authorization: 'Bearer not-a-jwt' } });
    assert.match(res401.headers.get('www-authenticate') ?? '', /^Bearer realm=".*", error="invalid_token"$/);
    assert.match(await res401.text(), /Jwt/);
    // Rule 2 and additional rule 2: no token and no AuthorizationPolicy: allowed.
    assert.equal(await status(), 200, 'rule 2: no token, no AuthorizationPolicy');

    // Without any policy, tokens are not inspected at all.
    rmSync(join(mesh.configDir, '01-require-jwt.yaml'));
    await expectStatus(200, 'not-a-jwt', 'no RequestAuthentication: tokens are not inspected');
    save('01-require-jwt.yaml', policyWith('01-require-jwt.yaml'));
    await expectStatus(401, 'not-a-jwt', 'the RequestAuthentication is back');

    // Rules 3 and 4, additional rule 3: an ALLOW policy on requestPrincipals.
    const alice = await mint('sub=alice');
    save('02-allow.yaml', policyWith('02-allow-alice.yaml'));
    await expectStatus(403, undefined, 'rule 4: no token under an ALLOW policy');
    assert.equal(await status(alice), 200, 'rule 3: the listed principal');
    assert.equal(await status(await mint('sub=bob')), 403, 'additional rule 3: a principal no rule lists');

    // Rules 5 and 6: the same policy edited in place to require a group claim.
    save('02-allow.yaml', policyWith('03-allow-admins.yaml'));
    await expectStatus(403, alice, 'rule 5: a token without the groups claim');
    assert.equal(await status(await mint('sub=alice&groups=dev,admins')), 200, 'rule 6: groups contains admins');
    assert.equal(await status(await mint('sub=alice&groups=dev')), 403, 'groups without admins');

    // A string claim.
    save(
      '02-allow.yaml',
      policyWith('03-allow-admins.yaml').replace('request.auth.claims[groups]', 'request.auth.claims[team]').replace('values: ["admins"]', 'values: ["blue"]'),
    );
    await expectStatus(200, await mint('sub=carol&claim.team=blue'), 'a string claim with the listed value');
    assert.equal(await status(await mint('sub=carol&claim.team=red')), 403, 'a string claim with another value');

    // Tokens that fail validation: 401 whatever the authorization policy says.
    const valid = await mint('sub=carol&claim.team=blue');
    const { privateKey } = await generateKeyPair('RS256');
    const kid = JSON.parse(Buffer.from(valid.split('.')[0]!, 'base64url').toString()).kid as string;
    const forged = await new SignJWT({ team: 'blue' }).setProtectedHeader({ alg: 'RS256', kid }).setIssuer(issuer).setSubject('carol').setExpirationTime('1h').sign(privateKey);
    const none = `${Buffer.from(JSON.stringify({ alg: 'none', typ: 'JWT' })).toString('base64url')}.${valid.split('.')[1]}.`;
    const bad: Array<[string, string]> = [
      ['expired', await mint('sub=carol&claim.team=blue&exp=-10m')],
      ['not yet valid', await mint('sub=carol&claim.team=blue&nbf=10m')],
      ['wrong issuer', await mint('sub=carol&claim.team=blue&iss=https://elsewhere.example')],
      ['wrong key', forged],
      ['alg none', none],
      ['truncated', valid.slice(0, valid.length - 20)],
    ];
    for (const [why, token] of bad) assert.equal(await status(token), 401, why);

    // The JWKS issuer goes down: the keys the proxy already has keep validating.
    await mesh.stopIssuer();
    assert.equal(await status(valid), 200, 'issuer down: a valid token still validates');
    // The discovery server restarts mid-traffic: the proxy keeps its config and keeps serving.
    await mesh.stopDiscovery();
    assert.equal(await status(valid), 200, 'control plane down: last config still allows');
    assert.equal(await status(), 403, 'control plane down: last config still denies');
    await mesh.startDiscovery();
    // After the restart the proxy is connected again: a new edit reaches it.
    rmSync(join(mesh.configDir, '02-allow.yaml'));
    await expectStatus(200, undefined, 'an edit after the control plane restarted');
  } catch (e) {
    (e as Error).message += `\n--- mesh output ---\n${mesh.output().slice(-6000)}`;
    throw e;
  } finally {
    await mesh.stop();
  }
});
