// The mesh's ALPN override filter (`mesh.alpn`, the Go mesh's `istio.alpn`): it records on the
// request, by upstream protocol, the ALPN its upstream connection offers; the router takes the one
// of the cluster's protocol, and the cluster's mesh-mTLS transport offers it instead of its own
// (connections are pooled per ALPN). Entries with no tokens are left out (the cluster's ALPN stays).
import { FilterConfig_Protocol, FilterConfigSchema } from '../../gen/mesh/envoy/config/filter/http/alpn/v2alpha1/config_pb.js';
import type { AlpnOverride, UpstreamProtocol } from '../../envoy/request.js';
import { ConfigError } from '../../envoy/config-error.js';
import { CONTINUE } from '../../envoy/filter.js';
import { registerHttpFilter } from './registry.js';

const PROTOCOLS: Readonly<Record<FilterConfig_Protocol, UpstreamProtocol>> = {
  [FilterConfig_Protocol.HTTP10]: 'http/1.0',
  [FilterConfig_Protocol.HTTP11]: 'http/1.1',
  [FilterConfig_Protocol.HTTP2]: 'h2',
};

registerHttpFilter({
  schema: FilterConfigSchema,
  compile(config, name) {
    const override = new Map<UpstreamProtocol, readonly string[]>();
    config.alpnOverride.forEach((entry, i) => {
      const protocol = PROTOCOLS[entry.upstreamProtocol];
      if (!protocol) throw new ConfigError(`${name}.alpn_override[${i}].upstream_protocol`, `unknown protocol ${entry.upstreamProtocol}`);
      if (entry.alpnOverride.length > 0) override.set(protocol, [...entry.alpnOverride]);
    });
    const recorded: AlpnOverride = override;
    return {
      filter: {
        name,
        decodeHeaders(req) {
          req.alpnOverride = recorded;
          return CONTINUE;
        },
      },
    };
  },
});
