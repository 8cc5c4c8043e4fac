// The HTTP filters this proxy runs: one import per filter file, each registers itself.
import './alpn.js';
import './ext-authz.js';
import './cors.js';
import './fault.js';
import './jwt-authn.js';
import './peer-metadata.js';
import './rbac.js';
import './standard-metrics.js';
import './router.js';
