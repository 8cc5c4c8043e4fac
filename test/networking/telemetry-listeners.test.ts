// Telemetry access logging in the listeners the discovery server builds (xds/generators/
// access-logs.ts): CLIENT loggers on outbound listeners and gateways, SERVER loggers on inbound
// ones, the mesh config's accessLogFile where no Telemetry configures a side, per workload within
// one snapshot, and through the XDS cache across snapshots when a Telemetry changes.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { Listener } from '../../src/gen/envoy/config/listener/v3/listener_pb.js';
import type { AccessLog } from '../../src/gen/envoy/config/accesslog/v3/accesslog_pb.js';
import { FileAccessLogSchema } from '../../src/gen/envoy/extensions/access_loggers/file/v3/file_pb.js';
import { HttpConnectionManagerSchema } from '../../src/gen/envoy/extensions/filters/network/http_connection_manager/v3/http_connection_manager_pb.js';
import { TcpProxySchema } from '../../src/gen/envoy/extensions/filters/network/tcp_proxy/v3/tcp_proxy_pb.js';
import { unpack } from '../../src/envoy/types.js';
import { HCM_FILTER_NAME, TCP_PROXY_FILTER_NAME } from '../../src/envoy/names.js';
import type { AnyResource, TelemetrySpec } from '../../src/api/types.js';
import { setScopeLevel } from '../../src/common/log.js';
import { parseMeshConfig } from '../../src/model/mesh-config.js';
import { parseProxy } from '../../src/model/proxy.js';
import { XdsCache } from '../../src/xds/cache.js';
import type { AccessLogging } from '../../src/xds/generators/access-logs.js';
import { sidecarListeners } from '../../src/xds/generators/sidecar.js';
import { gatewayListeners } from '../../src/xds/generators/gateway.js';
import { goldenCases } from '../helpers/golden.js';
import { MESH, pushOf, sidecarProxy, validated } from './fixtures.js';

setScopeLevel('model', 'error');

const MESH_CONFIG = `
accessLogFile: /var/log/mesh.log
extensionProviders:
- name: client-file
  envoyFileAccessLog: { path: /var/log/client.log }
- name: server-file
  envoyFileAccessLog: { path: /var/log/server.log, logFormat: { labels: { code: "%RESPONSE_CODE%" } } }
`;

function logging(extra = ''): AccessLogging {
  const m = parseMeshConfig(MESH_CONFIG + extra, 'mesh.yaml');
  return { ...(m.accessLog ? { mesh: m.accessLog } : {}), providers: m.telemetryProviders };
}

function telemetry(namespace: string, name: string, spec: TelemetrySpec): AnyResource {
  return validated(name, [{ apiVersion: 'telemetry.mesh.io/v1', kind: 'Telemetry', metadata: { namespace, name }, spec }])[0]!;
}

const paths = (logs: readonly AccessLog[]): string[] =>
  logs.map((l) => (l.configType.case === 'typedConfig' ? unpack(l.configType.value, FileAccessLogSchema).path : '?') + (l.filter ? ' (NR)' : ''));

/** Per listener: its own loggers, and the distinct loggers of its connection managers and TCP proxies. */
function logged(listeners: readonly Listener[]): Record<string, { listener: string[]; chains: string[] }> {
  return Object.fromEntries(
    listeners.map((l) => {
      const chains = l.filterChains.flatMap((c) =>
        c.filters.flatMap((f) => {
          if (f.configType.case !== 'typedConfig') return [];
          if (f.name === HCM_FILTER_NAME) return paths(unpack(f.configType.value, HttpConnectionManagerSchema).accessLog);
          if (f.name === TCP_PROXY_FILTER_NAME) return paths(unpack(f.configType.value, TcpProxySchema).accessLog);
          return [];
        }),
      );
      return [l.name, { listener: paths(l.accessLog), chains: [...new Set(chains)].sort() }];
    }),
  );
}

const echo = (version: string) => sidecarProxy(version === 'v1' ? '10.0.0.1' : '10.0.0.2', `echo-${version}`, 'foo', { LABELS: { app: 'echo', version } });

const BY_SIDE = telemetry('foo', 'sides', {
  accessLogging: [
    { providers: [{ name: 'client-file' }], match: { mode: 'CLIENT' } },
    { providers: [{ name: 'server-file' }], match: { mode: 'SERVER' } },
  ],
});

test('a namespace Telemetry per side: outbound listeners log CLIENT providers, inbound ones SERVER providers, never the mesh file', () => {
  const l = logged(sidecarListeners(echo('v1'), pushOf([...MESH, BY_SIDE]), { accessLogging: logging() }));
  assert.deepEqual(l['virtualInbound'], { listener: ['/var/log/server.log (NR)'], chains: ['/var/log/server.log'] });
  assert.deepEqual(l['virtualOutbound'], { listener: ['/var/log/client.log (NR)'], chains: ['/var/log/client.log'] });
  for (const name of ['0.0.0.0_80', '0.0.0.0_7070', '10.96.0.20_5432', '0.0.0.0_443']) assert.deepEqual(l[name]?.chains, ['/var/log/client.log'], name);
});

test('disableEnvoyListenerLog: Telemetry loggers stay on chains, not on listeners', () => {
  const l = logged(sidecarListeners(echo('v1'), pushOf([...MESH, BY_SIDE]), { accessLogging: logging('disableEnvoyListenerLog: true\n') }));
  assert.deepEqual(l['virtualInbound'], { listener: [], chains: ['/var/log/server.log'] });
  assert.deepEqual(l['virtualOutbound'], { listener: [], chains: ['/var/log/client.log'] });
});

test('within one snapshot: a selecting Telemetry turns one workload\'s SERVER side off; its neighbour and another namespace keep theirs', () => {
  const quiet = telemetry('foo', 'quiet-v2', { selector: { matchLabels: { version: 'v2' } }, accessLogging: [{ providers: [{ name: 'server-file' }], match: { mode: 'SERVER' }, disabled: true }] });
  const push = pushOf([...MESH, BY_SIDE, quiet]);
  const opts = { accessLogging: logging(), cache: new XdsCache() };
  const v2 = logged(sidecarListeners(echo('v2'), push, opts));
  const v1 = logged(sidecarListeners(echo('v1'), push, opts));
  const other = logged(sidecarListeners(sidecarProxy('10.0.0.99', 'echo-other-ns', 'bar', { LABELS: { app: 'echo', version: 'v2' } }), push, opts));
  assert.deepEqual(v2['virtualInbound'], { listener: [], chains: [] }, 'v2: explicitly disabled, not the mesh file');
  assert.deepEqual(v2['virtualOutbound']?.chains, ['/var/log/client.log']);
  assert.deepEqual(v1['virtualInbound']?.chains, ['/var/log/server.log']);
  assert.deepEqual(other['virtualInbound'], { listener: ['/var/log/mesh.log (NR)'], chains: ['/var/log/mesh.log'] }, "bar has no Telemetry: the mesh config's accessLogFile");
  assert.deepEqual(other['virtualOutbound']?.chains, ['/var/log/mesh.log']);
});

test('a side no Telemetry entry names falls back to the mesh file; disabled without providers leaves it (it is not a provider)', () => {
  const serverOnly = telemetry('foo', 'server', { accessLogging: [{ providers: [{ name: 'server-file' }], match: { mode: 'SERVER' } }] });
  const l = logged(sidecarListeners(echo('v1'), pushOf([...MESH, serverOnly]), { accessLogging: logging() }));
  assert.deepEqual(l['virtualOutbound']?.chains, ['/var/log/mesh.log']);
  assert.deepEqual(l['virtualInbound']?.chains, ['/var/log/server.log']);
  const off = telemetry('foo', 'off', { accessLogging: [{ disabled: true }] });
  const offLogs = logged(sidecarListeners(echo('v1'), pushOf([...MESH, off]), { accessLogging: logging() }));
  assert.deepEqual(offLogs['virtualInbound']?.chains, ['/var/log/mesh.log'], 'as the Go mesh: disabled turns off providers, and none is in scope');
  const offDefault = logged(sidecarListeners(echo('v1'), pushOf([...MESH, off]), { accessLogging: logging('defaultProviders: { accessLogging: [client-file] }\n') }));
  assert.deepEqual(offDefault['virtualInbound'], { listener: [], chains: [] }, 'with a default provider, disabled turns it off');
});

test('defaultProviders.accessLogging without any Telemetry: every proxy logs to the default providers instead of accessLogFile', () => {
  const l = logged(sidecarListeners(echo('v1'), pushOf(MESH), { accessLogging: logging('defaultProviders: { accessLogging: [server-file, client-file] }\n') }));
  assert.deepEqual(l['virtualInbound']?.chains, ['/var/log/client.log', '/var/log/server.log']);
  assert.deepEqual(l['0.0.0.0_80']?.chains, ['/var/log/client.log', '/var/log/server.log']);
});

test('across snapshots with one XDS cache: a changed or deleted Telemetry changes the listeners', () => {
  const opts = { accessLogging: logging(), cache: new XdsCache() };
  const first = logged(sidecarListeners(echo('v1'), pushOf([...MESH, BY_SIDE]), opts));
  assert.deepEqual(first['0.0.0.0_80']?.chains, ['/var/log/client.log']);
  const swapped = telemetry('foo', 'sides', { accessLogging: [{ providers: [{ name: 'server-file' }] }] });
  const second = logged(sidecarListeners(echo('v1'), pushOf([...MESH, swapped]), opts));
  assert.deepEqual(second['0.0.0.0_80']?.chains, ['/var/log/server.log']);
  assert.deepEqual(second['virtualOutbound']?.chains, ['/var/log/server.log']);
  assert.deepEqual(second['virtualInbound']?.chains, ['/var/log/server.log']);
  const third = logged(sidecarListeners(echo('v1'), pushOf(MESH), opts));
  assert.deepEqual(third['0.0.0.0_80']?.chains, ['/var/log/mesh.log']);
  assert.deepEqual(third['virtualInbound']?.chains, ['/var/log/mesh.log']);
});

test('a gateway logs as the CLIENT side: a root namespace Telemetry for CLIENT applies, one for SERVER does not', () => {
  const c = goldenCases('test/networking/testdata/gateway').find((g) => g.name === 'http-hosts')!;
  const router = parseProxy('router~10.0.0.60~ingress-1.ingress~ingress.svc.cluster.local', { NAMESPACE: 'ingress', LABELS: { app: 'ingress' } });
  const mode = (m: 'CLIENT' | 'SERVER') => telemetry('mesh-system', 'mesh', { accessLogging: [{ providers: [{ name: 'client-file' }], match: { mode: m } }] });
  const opts = { accessLogging: logging() };
  const client = Object.values(logged(gatewayListeners(router, pushOf([...validated(c.name, c.documents), mode('CLIENT')]), opts)));
  assert.ok(client.length > 0 && client.every((l) => l.chains.join() === '/var/log/client.log' && l.listener.join() === '/var/log/client.log (NR)'), JSON.stringify(client));
  const server = Object.values(logged(gatewayListeners(router, pushOf([...validated(c.name, c.documents), mode('SERVER')]), opts)));
  assert.ok(server.every((l) => l.chains.join() === '/var/log/mesh.log'), JSON.stringify(server));
});
