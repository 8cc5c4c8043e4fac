// Which port a call arrived on. grpc-js gives handlers no local address, and a TLS call without a
// client certificate looks like a plaintext one, so each port's credentials carry an interceptor
// that stamps the `mesh-transport` metadata with its kind, overwriting whatever the client sent.
import { Metadata, ServerCredentials, ServerInterceptingCall, type ServerInterceptor } from '@grpc/grpc-js';
import type { SecureContextOptions } from 'node:tls';

export const TRANSPORT_METADATA = 'mesh-transport';
export type Transport = 'tls' | 'plaintext';

function stamp(kind: Transport): ServerInterceptor {
  return (_method, call) =>
    new ServerInterceptingCall(call, {
      start: (next) =>
        next({
          onReceiveMetadata: (md: Metadata, forward: (md: Metadata) => void) => {
            md.set(TRANSPORT_METADATA, kind);
            forward(md);
          },
        }),
    });
}

/** The transport a call's metadata was stamped with; undefined on a port bound without these credentials. */
export function transportOf(md: Metadata): Transport | undefined {
  const v = md.get(TRANSPORT_METADATA)[0];
  return v === 'tls' || v === 'plaintext' ? v : undefined;
}

/** Plaintext (the :15010 port). */
export class PlaintextCredentials extends ServerCredentials {
  private readonly interceptors = [stamp('plaintext')];

  constructor() {
    super(null);
  }

  override _getInterceptors(): ServerInterceptor[] {
    return this.interceptors;
  }

  _equals(other: ServerCredentials): boolean {
    return other === this;
  }
}

/**
 * TLS whose context can be replaced in place (a rotated root or serving certificate); client
 * certificates are requested and verified, not required.
 */
export class RotatingTlsCredentials extends ServerCredentials {
  private readonly interceptors = [stamp('tls')];

  constructor(context: SecureContextOptions) {
    super({ requestCert: true, rejectUnauthorized: false }, context);
  }

  update(context: SecureContextOptions): void {
    this.updateSecureContextOptions(context);
  }

  override _getInterceptors(): ServerInterceptor[] {
    return this.interceptors;
  }

  _equals(other: ServerCredentials): boolean {
    return other === this;
  }
}
