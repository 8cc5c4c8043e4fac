// What the TLS tests share: a mesh CA made with the CA's own code (src/security/ca/pki.ts), a
// workload whose agent serves its certificate over the real SDS server (files mounted, so a test
// renews by writing new files), the Envoy TLS resources the discovery server emits for sidecars,
// and a mesh-proxy wired to an ADS fixture and to that SDS socket.
import { mkdirSync, mkdtempSync, renameSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestContext } from 'node:test';
import type { JsonObject, MessageInitShape } from '@bufbuild/protobuf';
import { SdsServer } from '../../src/agent/sds/server.js';
import { CERT_FILES, SecretManager as AgentSecrets } from '../../src/agent/sds/secret-manager.js';
import { createSelfSignedRoot, generateKeyPair, signLeaf, type KeyAlgorithm, type KeyPair } from '../../src/security/ca/pki.js';
import { loadBootstrap } from '../../src/dataplane/bootstrap.js';
import { MeshProxy } from '../../src/dataplane/proxy.js';
import type { TransportSocketSchema } from '../../src/gen/envoy/config/core/v3/base_pb.js';
import { ApiConfigSource_ApiType, ApiVersion } from '../../src/gen/envoy/config/core/v3/config_source_pb.js';
import { SubjectAltNameMatcher_SanType } from '../../src/gen/envoy/extensions/transport_sockets/tls/v3/common_pb.js';
import type { SdsSecretConfigSchema } from '../../src/gen/envoy/extensions/transport_sockets/tls/v3/secret_pb.js';
import { DownstreamTlsContextSchema, UpstreamTlsContextSchema, type CommonTlsContextSchema } from '../../src/gen/envoy/extensions/transport_sockets/tls/v3/tls_pb.js';
import { TlsInspectorSchema } from '../../src/gen/envoy/extensions/filters/listener/tls_inspector/v3/tls_inspector_pb.js';
import { pack } from '../../src/envoy/types.js';
import { bootstrapJson, FixtureAds } from './xds-fixtures.js';
import * as x509 from '@peculiar/x509';

export const TRUST_DOMAIN = 'cluster.local';
export const spiffe = (sa: string, ns = 'default'): string => `spiffe://${TRUST_DOMAIN}/ns/${ns}/sa/${sa}`;

export interface MeshCa {
  readonly rootPem: string;
  /** A leaf for `uri` (and DNS names): key and chain PEM; an ECDSA P-256 key unless `alg` says otherwise. */
  issue(uri: string, dns?: readonly string[], alg?: KeyAlgorithm): Promise<{ keyPem: string; chainPem: string }>;
  /** A CRL of this CA (PEM) revoking the certificates of these serial numbers (hex, as X509Certificate.serialNumber). */
  crl(revokedSerials: readonly string[]): Promise<string>;
}

/** A root of `trustDomain` (its subject names it: roots of different trust domains are told apart by it). */
export async function meshCa(trustDomain = TRUST_DOMAIN): Promise<MeshCa> {
  const keys: KeyPair = await generateKeyPair({ kind: 'ECDSA', curve: 'P-256' });
  const root = await createSelfSignedRoot(keys, trustDomain, 24 * 3600_000);
  return {
    rootPem: root.toString('pem'),
    issue: async (uri, dns = [], alg = { kind: 'ECDSA', curve: 'P-256' }) => {
      const leafKeys = await generateKeyPair(alg);
      const leaf = await signLeaf({ cert: root, key: keys.privateKey }, { publicKey: new x509.PublicKey(await crypto.subtle.exportKey('spki', leafKeys.publicKey)), uris: [uri], dnsNames: dns, ttlMs: 3600_000 });
      return { keyPem: leafKeys.pem, chainPem: leaf.toString('pem') };
    },
    crl: async (revokedSerials) => {
      const now = Date.now();
      const crl = await x509.X509CrlGenerator.create({
        issuer: root.subject,
        thisUpdate: new Date(now - 60_000),
        nextUpdate: new Date(now + 3600_000),
        entries: revokedSerials.map((serialNumber) => ({ serialNumber, revocationDate: new Date(now - 60_000) })),
        signingKey: keys.privateKey,
        signingAlgorithm: { name: 'ECDSA', hash: 'SHA-256' },
      });
      // OpenSSL (and Envoy) read CRLs under RFC 7468's label, X509 CRL.
      return crl.toString('pem').replace(/-----(BEGIN|END) CRL-----/g, '-----$1 X509 CRL-----');
    },
  };
}

/** A workload's certificates served by the agent's SDS server on a Unix socket. */
export interface Workload {
  readonly dir: string;
  readonly socket: string;
  readonly certDir: string;
  /** Writes a new certificate for the identity (the agent re-reads the mounted files and pushes it). */
  renew(): Promise<string>;
}

export async function workload(t: TestContext, ca: MeshCa, sa: string, ns = 'default'): Promise<Workload> {
  const dir = mkdtempSync(join(tmpdir(), 'mtls-dp-'));
  const certDir = join(dir, 'etc/certs');
  mkdirSync(certDir, { recursive: true });
  const write = async (): Promise<string> => {
    const { keyPem, chainPem } = await ca.issue(spiffe(sa, ns));
    // Written beside, then renamed in, so the agent never reads a half-written set.
    for (const [name, text] of [[CERT_FILES.key, keyPem], [CERT_FILES.chain, chainPem], [CERT_FILES.root, ca.rootPem]] as const) {
      writeFileSync(join(dir, `${name}.tmp`), text);
      renameSync(join(dir, `${name}.tmp`), join(certDir, name));
    }
    return chainPem;
  };
  await write();
  const secrets = new AgentSecrets({ source: { kind: 'files', dir: certDir }, graceRatio: 0.5 });
  await secrets.start();
  const socket = join(dir, 'var/run/secrets/workload-spiffe-uds/socket');
  const sds = new SdsServer(secrets, socket);
  await sds.start();
  t.after(() => {
    sds.close();
    secrets.close();
  });
  return { dir, socket, certDir, renew: write };
}

type SdsInit = MessageInitShape<typeof SdsSecretConfigSchema>;
type CommonInit = MessageInitShape<typeof CommonTlsContextSchema>;
type TransportInit = MessageInitShape<typeof TransportSocketSchema>;

/** An SdsSecretConfig fetched from the bootstrap's sds-grpc cluster, as the Go mesh writes it. */
export function sdsSecret(name: string): SdsInit {
  return {
    name,
    sdsConfig: {
      configSourceSpecifier: { case: 'apiConfigSource', value: { apiType: ApiConfigSource_ApiType.GRPC, transportApiVersion: ApiVersion.V3, grpcServices: [{ targetSpecifier: { case: 'envoyGrpc', value: { clusterName: 'sds-grpc' } } }] } },
      initialFetchTimeout: { seconds: 0n },
      resourceApiVersion: ApiVersion.V3,
    },
  };
}

/** The mesh's common TLS context: `default` + ROOTCA over SDS, peers' URI SANs matched exactly. */
export function meshTls(peerSans: readonly string[], alpn: readonly string[] = []): CommonInit {
  return {
    tlsCertificateSdsSecretConfigs: [sdsSecret('default')],
    validationContextType: {
      case: 'combinedValidationContext',
      value: {
        defaultValidationContext: { matchTypedSubjectAltNames: peerSans.map((s) => ({ sanType: SubjectAltNameMatcher_SanType.URI, matcher: { matchPattern: { case: 'exact', value: s } } })) },
        validationContextSdsSecretConfig: sdsSecret('ROOTCA'),
      },
    },
    alpnProtocols: [...alpn],
  };
}

export function downstreamTls(common: CommonInit, requireClientCertificate = true): TransportInit {
  return { name: 'envoy.transport_sockets.tls', configType: { case: 'typedConfig', value: pack(DownstreamTlsContextSchema, { commonTlsContext: common, requireClientCertificate }) } };
}

export function upstreamTls(common: CommonInit, sni: string): TransportInit {
  return { name: 'envoy.transport_sockets.tls', configType: { case: 'typedConfig', value: pack(UpstreamTlsContextSchema, { commonTlsContext: common, sni }) } };
}

export const tlsInspector = { name: 'envoy.filters.listener.tls_inspector', configType: { case: 'typedConfig' as const, value: pack(TlsInspectorSchema, {}) } };

/** The endpoint metadata a transport_socket_match on `tlsMode` reads. */
export function tlsModeMetadata(mode: string): { filterMetadata: Record<string, JsonObject> } {
  return { filterMetadata: { 'envoy.transport_socket_match': { tlsMode: mode } } };
}

/** A bootstrap's node (the default: app-1 in default, metadata NAMESPACE only). */
export interface FixtureNode {
  readonly id: string;
  readonly cluster: string;
  readonly metadata: JsonObject;
}

/** The sidecar bootstrap (as the agent writes it) with the workload's SDS socket as `sds-grpc`; returns its path. */
export function sidecarBootstrap(w: Workload, adsPort: number, adminPort: number, node?: FixtureNode): string {
  const b = bootstrapJson(adsPort, adminPort) as { node: FixtureNode; static_resources: { clusters: object[] } };
  if (node) b.node = node;
  b.static_resources.clusters.push({
    name: 'sds-grpc',
    type: 'STATIC',
    connect_timeout: '1s',
    typed_extension_protocol_options: {
      'envoy.extensions.upstreams.http.v3.HttpProtocolOptions': { '@type': 'type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions', explicit_http_config: { http2_protocol_options: {} } },
    },
    load_assignment: { cluster_name: 'sds-grpc', endpoints: [{ lb_endpoints: [{ endpoint: { address: { pipe: { path: w.socket } } } }] }] },
  });
  const file = join(w.dir, `bootstrap-${adsPort}.json`);
  writeFileSync(file, JSON.stringify(b));
  return file;
}

/** An in-process mesh-proxy with its own ADS fixture and the workload's SDS socket as `sds-grpc`. */
export async function sidecar(t: TestContext, w: Workload, node?: FixtureNode): Promise<{ proxy: MeshProxy; ads: FixtureAds; admin: string }> {
  const ads = await new FixtureAds().listen();
  const proxy = new MeshProxy({ bootstrap: loadBootstrap({ path: sidecarBootstrap(w, ads.port, 0, node) }), drainTimeMs: 500, initialBackoffMs: 50 });
  await proxy.start();
  t.after(async () => {
    await proxy.stop(200);
    ads.close();
  });
  return { proxy, ads, admin: `http://127.0.0.1:${proxy.adminPort}` };
}

/** An HTTP server answering with who it is and the request headers it got. */
export async function echo(t: TestContext, who: string): Promise<number> {
  const server: Server = createServer((req, res) => {
    res.setHeader('content-type', 'application/json');
    res.end(JSON.stringify({ who, headers: req.headers }));
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  t.after(() => {
    server.closeAllConnections();
    server.close();
  });
  return (server.address() as { port: number }).port;
}
