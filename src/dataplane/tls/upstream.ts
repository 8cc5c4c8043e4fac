// A cluster's UpstreamTlsContext: the TLS client side of each new upstream connection (HTTP/1.1
// pools, HTTP/2 sessions, the TCP proxy). As in Envoy, the server certificate is verified only when
// a validation context gives a trusted CA; then its CRLs, SAN and pin checks apply, and the host
// name is not checked (`sni` is only what the client sends). ACCEPT_UNTRUSTED (the Go mesh's
// insecureSkipVerify) connects whatever the server presents, failures only counted. Each
// connection reads the current secrets.
import { X509Certificate } from 'node:crypto';
import type { Socket } from 'node:net';
import { connect as tlsConnect, createSecureContext, type PeerCertificate, type SecureContext, type TLSSocket } from 'node:tls';
import { scope } from '../../common/log.js';
import { UpstreamTlsContextSchema, type UpstreamTlsContext } from '../../gen/envoy/extensions/transport_sockets/tls/v3/tls_pb.js';
import { unappliedFields } from '../../envoy/config-error.js';
import { compileCommonTls, failedCheck, peerCertOf, type CompiledTls, type TlsOptions } from './context.js';
import type { SslStats } from './downstream.js';
import type { SecretManager } from './secrets.js';
import { MESH_ALPN } from '../../security/mtls/tls-context.js';

const log = scope('upstream');

const UNAPPLIED_UPSTREAM = ['allowRenegotiation', 'maxSessionKeys', 'enforceRsaKeyUsage'];

/** OpenSSL's chain verification failures (node's error codes), counted as ssl.fail_verify_error. */
const VERIFY_ERRORS = /CERT|UNABLE_TO_|SELF_SIGNED|DEPTH_ZERO|CHAIN|SIGNATURE/;

/** Errors that ended an upstream TLS handshake (the connection never came up), for the router's reset reason. */
const handshakeFailures = new WeakSet<Error>();

/** Whether `e` ended an upstream TLS handshake. */
export function failedHandshake(e: Error): boolean {
  return handshakeFailures.has(e);
}

export class UpstreamTls {
  private readonly tls: CompiledTls;
  private readonly sni: string;
  /**
   * The OpenSSL context of the current secrets, made once per secret version: node:tls would
   * otherwise parse the key, the certificate chain and the CA bundle for every new connection.
   */
  private context?: { readonly built: TlsOptions; readonly secure: SecureContext };

  constructor(
    ctx: UpstreamTlsContext,
    field: string,
    secrets: SecretManager,
    private readonly stats: SslStats,
  ) {
    this.tls = compileCommonTls(ctx.commonTlsContext, field, 'client', secrets);
    this.sni = ctx.sni;
    const unapplied = unappliedFields(UpstreamTlsContextSchema, ctx, UNAPPLIED_UPSTREAM);
    if (unapplied.length > 0) log.warn(`${field}: accepted but not applied: ${unapplied.join(', ')}`);
  }

  /**
   * The ALPN a request's connection offers given its `mesh.alpn` override: the override when this
   * is the mesh's mTLS (it offers the `mesh` token), else undefined (the configured ALPN). A user's
   * TLS (DestinationRule SIMPLE/MUTUAL) keeps its own, as the Go mesh's `alpn_override: "false"`.
   */
  alpnFor(override: readonly string[] | undefined): readonly string[] | undefined {
    return override?.length && this.tls.alpn.includes(MESH_ALPN) ? override : undefined;
  }

  /**
   * The TLS client over `tcp` (connecting or connected), offering `alpn` (from alpnFor) or the
   * configured ALPN. It emits `secureConnect` once the server is verified; a refused server, or a
   * secret not there yet, destroys it with the reason.
   */
  wrap(tcp: Socket, alpn: readonly string[] = this.tls.alpn): Socket | TLSSocket {
    const o = this.tls.options();
    if (typeof o === 'string') {
      this.stats.connection_error.inc();
      tcp.destroy(new Error(`upstream TLS: ${o}`));
      return tcp;
    }
    if (this.context?.built !== o) this.context = { built: o, secure: createSecureContext(o.context) };
    let sanRefused = false;
    const s = tlsConnect({
      socket: tcp,
      secureContext: this.context.secure,
      ...(this.sni ? { servername: this.sni } : {}),
      ...(alpn.length ? { ALPNProtocols: [...alpn] } : {}),
      rejectUnauthorized: o.verifies && !o.acceptUntrusted,
      // Called (by node) only once the chain verified: the validation context's checks, never the host name.
      checkServerIdentity: (_host: string, cert: PeerCertificate) => {
        const failed = failedCheck(o, peerCertOf(new X509Certificate(cert.raw)));
        if (!failed) return undefined;
        this.stats[failed].inc();
        if (o.acceptUntrusted) return undefined;
        sanRefused = true;
        return new Error(`upstream TLS: server certificate refused (${failed})`);
      },
    });
    let connected = !tcp.connecting;
    let secured = false;
    tcp.once('connect', () => (connected = true));
    s.once('secureConnect', () => {
      secured = true;
      // Only with ACCEPT_UNTRUSTED does an unverified chain get here.
      if (o.verifies && !s.authorized) this.stats.fail_verify_error.inc();
      this.stats.handshake.inc();
    });
    // A failure of the handshake itself (not of the TCP connect, not after it).
    s.on('error', (e: NodeJS.ErrnoException) => {
      if (!connected || secured) return;
      handshakeFailures.add(e);
      if (sanRefused) return;
      if (VERIFY_ERRORS.test(e.code ?? '')) this.stats.fail_verify_error.inc();
      else this.stats.connection_error.inc();
    });
    return s;
  }
}
