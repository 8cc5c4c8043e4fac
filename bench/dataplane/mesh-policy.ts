// The local mesh's config changes the data-plane benches make: the sample JWT + RBAC policy, and
// polling until the proxy shows a change.
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';

export async function until(check: () => Promise<boolean>, what: string): Promise<void> {
  const deadline = Date.now() + 30_000;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

/** The sample RequestAuthentication (for the mesh's issuer) and "allow admins" AuthorizationPolicy, then a tokenless request to `inbound` is denied. */
export async function applyJwtRbac(configDir: string, issuerUrl: string, inbound: string): Promise<void> {
  const sample = (file: string) => readFileSync(join(process.cwd(), 'samples', 'policies', file), 'utf8');
  writeFileSync(join(configDir, '01-require-jwt.yaml'), sample('01-require-jwt.yaml').replaceAll('http://127.0.0.1:8899', issuerUrl));
  writeFileSync(join(configDir, '03-allow-admins.yaml'), sample('03-allow-admins.yaml'));
  await until(async () => (await fetch(inbound)).status === 403, 'the JWT + RBAC config');
}

/** A token of the mesh's sample issuer that the "allow admins" policy lets through. */
export async function adminToken(issuerUrl: string): Promise<string> {
  return (await (await fetch(`${issuerUrl}/token?sub=bench&groups=admins&exp=1h`)).text()).trim();
}
