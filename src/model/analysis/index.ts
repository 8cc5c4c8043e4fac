// Every analyzer, and one analysis run over a snapshot: messages sorted by resource, then path.
import { gatewaySelector } from './gateway-selector.js';
import { peerAuthenticationConflict } from './peerauthentication-conflict.js';
import { mtlsDestinationRule } from './mtls-destination-rule.js';
import { requestPrincipalIssuer } from './request-principal-issuer.js';
import { selectorNoWorkload } from './selector-no-workload.js';
import { telemetryConflict } from './telemetry-conflict.js';
import type { AnalysisInput, AnalysisMessage, Analyzer } from './types.js';
import { virtualServiceConflict } from './virtualservice-conflict.js';
import { virtualServiceSubset } from './virtualservice-subset.js';

export const ANALYZERS: readonly Analyzer[] = [selectorNoWorkload, requestPrincipalIssuer, virtualServiceSubset, gatewaySelector, virtualServiceConflict, peerAuthenticationConflict, mtlsDestinationRule, telemetryConflict];

const key = (m: AnalysisMessage) => `${m.resource.kind}/${m.resource.namespace}/${m.resource.name}\0${m.path}\0${m.code}`;

export function analyze(input: AnalysisInput, analyzers: readonly Analyzer[] = ANALYZERS): AnalysisMessage[] {
  return analyzers.flatMap((a) => a.analyze(input)).sort((a, b) => (key(a) < key(b) ? -1 : key(a) > key(b) ? 1 : 0));
}
