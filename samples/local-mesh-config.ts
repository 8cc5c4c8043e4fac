// The local mesh's config directory: the samples/mesh files with the chosen ports, the sample
// Gateway and the JWT policy pointed at the started issuer.
import { mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import type { LocalMeshPorts } from './local-mesh.js';
import { ROOT } from './repo.js';

/**
 * Writes the sample workload config with the chosen ports (the files name 8000, 9080 and 15080).
 * With `client`, the service's endpoint is the sidecar's inbound port, labelled as the injector
 * labels a workload with a sidecar (auto mTLS), and the app's sidecar leaves the service port to the
 * client's sidecar (both proxies bind outbound listeners on the one loopback). With
 * `healthChecked`, httpbin's WorkloadEntry is an endpoint only while its agent's probe passes.
 */
export function seedConfig(configDir: string, ports: LocalMeshPorts, client: boolean, healthChecked = false): void {
  mkdirSync(configDir, { recursive: true });
  for (const f of readdirSync(join(ROOT, 'samples', 'mesh'))) {
    const docs = parseAllDocuments(readFileSync(join(ROOT, 'samples', 'mesh', f), 'utf8'));
    for (const doc of docs) {
      const kind = doc.get('kind');
      if (kind === 'WorkloadEntry') doc.setIn(['spec', 'ports', 'http'], client ? ports.inbound : ports.app);
      if (kind === 'WorkloadEntry' && client) doc.setIn(['spec', 'labels', 'security.mesh.io/tlsMode'], 'mesh');
      if (kind === 'WorkloadEntry' && healthChecked) doc.setIn(['metadata', 'annotations', 'proxy.mesh.io/health-checks-enabled'], 'true');
      if (kind === 'Sidecar' && client) doc.setIn(['spec', 'egress', 0, 'hosts'], ['mesh-system/*']);
      if (kind === 'ServiceEntry') doc.setIn(['spec', 'ports', 0, 'number'], ports.service);
      if (kind === 'Sidecar') {
        doc.setIn(['spec', 'ingress', 0, 'port', 'number'], ports.inbound);
        doc.setIn(['spec', 'ingress', 0, 'defaultEndpoint'], `127.0.0.1:${ports.app}`);
      }
    }
    writeFileSync(join(configDir, f), docs.map((d) => d.toString()).join('---\n'));
  }
}

/** The sample Gateway and its VirtualService, the Gateway's server on the chosen port. */
export function writeGatewayConfig(configDir: string, port: number): void {
  const docs = parseAllDocuments(readFileSync(join(ROOT, 'samples', 'gateway', 'ingress.yaml'), 'utf8'));
  for (const doc of docs) if (doc.get('kind') === 'Gateway') doc.setIn(['spec', 'servers', 0, 'port', 'number'], port);
  writeFileSync(join(configDir, 'ingress.yaml'), docs.map((d) => d.toString()).join('---\n'));
}

/** The RequestAuthentication of samples/policies/01, pointed at the issuer actually started. */
export function writeIssuerPolicy(configDir: string, issuer: string): void {
  const text = readFileSync(join(ROOT, 'samples', 'policies', '01-require-jwt.yaml'), 'utf8').replaceAll('http://127.0.0.1:8899', issuer);
  writeFileSync(join(configDir, '01-require-jwt.yaml'), text);
}
