// The xDS types the discovery server serves, and their ResourceGenerators over the current
// PushContext. Each type's module holds its generator and its push scope rule side by side; this
// list registers them, in make-before-break push order (clusters, endpoints, listeners, routes).
import { settingDefault } from '../../common/env.js';
import { scope } from '../../common/log.js';
import { counter } from '../../common/metrics.js';
import type { ResourceGenerator } from '../generator.js';
import { XdsCache } from '../cache.js';
import { cds } from './cds.js';
import { ConflictRecorder, oncePerPush, ProxyModels, type MeshContext, type MeshGeneratorOptions, type XdsType } from './context.js';
import { eds } from './eds.js';
import { lds } from './lds.js';
import { nds } from './nds.js';
import { rds } from './rds.js';
import { sds } from './sds.js';

export { ProxyModels, type MeshGeneratorOptions, type XdsType } from './context.js';

const log = scope('model');

/** Every served type; a new type is one module and one line here. */
export const MESH_XDS_TYPES: readonly XdsType[] = [cds, eds, lds, rds, nds, sds];

/**
 * The generator of each served type. Options left out take the spec's defaults (the program passes
 * the settings it read); the cache defaults to one of the spec's default size.
 */
export function createMeshGenerators(options: MeshGeneratorOptions, types: readonly XdsType[] = MESH_XDS_TYPES): Map<string, ResourceGenerator> {
  const conflicts = new ConflictRecorder(options.pushContext);
  const ctx: MeshContext = {
    conflicts,
    opts: {
      inboundSniffing: settingDefault('PILOT_ENABLE_PROTOCOL_SNIFFING_FOR_INBOUND'),
      outboundSniffing: settingDefault('PILOT_ENABLE_PROTOCOL_SNIFFING_FOR_OUTBOUND'),
      headlessPodListeners: settingDefault('PILOT_ENABLE_HEADLESS_SERVICE_POD_LISTENERS'),
      detectionTimeout: settingDefault('PILOT_INBOUND_PROTOCOL_DETECTION_TIMEOUT') / 1000,
      onProblem: oncePerPush(options.pushContext, (message) => log.warn(message)),
      onConflict: (c) => conflicts.record(c),
      onInboundConflict: (c) => conflicts.inbound(c),
      scopeGatewayToNamespace: settingDefault('PILOT_SCOPE_GATEWAY_TO_NAMESPACE'),
      filterGatewayClusters: settingDefault('PILOT_FILTER_GATEWAY_CLUSTER_CONFIG'),
      onGatewayRejected: oncePerPush(options.pushContext, (message) => {
        log.warn(message);
        counter('pilot_total_rejected_configs').inc({ kind: 'Gateway' });
      }),
      ...options,
      cache: options.cache ?? new XdsCache(),
      proxies: options.proxies ?? new ProxyModels(),
    },
  };
  return new Map(types.map((t) => [t.typeUrl, t.generator(ctx)]));
}
