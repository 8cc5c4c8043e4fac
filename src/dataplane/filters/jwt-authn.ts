// The jwt_authn HTTP filter: the shared evaluator (envoy/jwt-authn.ts) with the proxy's options.
import { JwtAuthenticationSchema } from '../../gen/envoy/extensions/filters/http/jwt_authn/v3/config_pb.js';
import { compileJwtAuthn, type JwtAuthnStats } from '../../envoy/jwt-authn.js';
import { registerHttpFilter } from './registry.js';

declare module './registry.js' {
  interface HttpFilterStatsByGroup {
    jwt_authn: JwtAuthnStats;
  }
}

registerHttpFilter({
  schema: JwtAuthenticationSchema,
  compile(config, name, ctx) {
    const compiled = compileJwtAuthn(config, ctx.jwt);
    return { filter: { name, decodeHeaders: (r) => compiled.decodeHeaders(r) }, stats: { name, jwt_authn: compiled.stats } };
  },
});
