// Which credential source the discovery server runs for credentialName (MESHD_ENABLE_SDS_SERVER):
// the orchestrator's Secrets, or in local mode the credentials tree of --configDir. Serving secrets
// is refused (fail closed) when the identity check that limits a proxy to its own namespace is off.
import { scope } from '../../common/log.js';
import { DirectoryCredentials } from './directory.js';
import { OrchestratorCredentials, type OrchestratorCredentialsOptions } from './orchestrator.js';
import { CredentialStore } from './store.js';

const log = scope('secretcontroller');

export interface CredentialSetup {
  readonly enabled: boolean;
  readonly identityCheck: boolean;
  /** --configDir without an orchestrator: the local tree. */
  readonly configDir?: string | undefined;
  /** The orchestrator to read Secrets from, when there is one. */
  readonly orchestrator?: OrchestratorCredentialsOptions | undefined;
}

export interface CredentialService {
  readonly store: CredentialStore;
  start(): Promise<void>;
  close(): void;
}

/** The credential service, or undefined (nothing served; Gateways with credentialName get a notice). */
export function credentialService(setup: CredentialSetup): CredentialService | undefined {
  if (!setup.enabled) {
    log.info('MESHD_ENABLE_SDS_SERVER=false: credentialName secrets are not served');
    return undefined;
  }
  if (!setup.identityCheck) {
    log.warn('MESHD_ENABLE_SDS_SERVER needs PILOT_ENABLE_XDS_IDENTITY_CHECK=true (without it a proxy could claim any namespace): credentialName secrets are not served');
    return undefined;
  }
  const store = new CredentialStore();
  const source = setup.orchestrator ? new OrchestratorCredentials(store, setup.orchestrator) : setup.configDir ? new DirectoryCredentials(store, setup.configDir) : undefined;
  if (!source) return undefined;
  return { store, start: () => source.start(), close: () => void source.close() };
}
