// A filter chain's DownstreamTlsContext: the TLS server side of each connection the chain takes.
// A node:tls Server that never listens does the handshakes (connections are emitted into it, as
// the HTTP servers of http-hosting.ts get theirs); its secure context is replaced when a secret
// changes, so new handshakes get the new certificate while established connections keep theirs.
// After the handshake the peer certificate is verified (trust chain and CRLs, then the validation
// context's SAN and pin checks) and the chain's network filter gets the decrypted stream. As in
// Envoy, SAN or pin checks make a client certificate required, and ACCEPT_UNTRUSTED lets a client
// through whatever its certificate (counted in ssl.fail_verify_*); only a certificate that passed
// every check gives the connection an identity (RBAC principals, XFCC).
import type { Socket } from 'node:net';
import { Server as TlsServer, type TLSSocket } from 'node:tls';
import { scope } from '../../common/log.js';
import { DownstreamTlsContextSchema, type DownstreamTlsContext } from '../../gen/envoy/extensions/transport_sockets/tls/v3/tls_pb.js';
import { ConfigError, unappliedFields } from '../../envoy/config-error.js';
import { inheritDestination } from '../original-dst.js';
import { inheritOriginalSrc } from '../original-src.js';
import { statName, type StatCounter, type StatsStore } from '../stats.js';
import { compileCommonTls, failedCheck, peerCertOf, type CompiledTls, type VerifyFailure } from './context.js';
import { rememberPeer } from './peer.js';
import type { SecretManager, SecretRef } from './secrets.js';

const log = scope('connection');

const UNAPPLIED_DOWNSTREAM = ['sessionTicketKeys', 'sessionTicketKeysSdsSecretConfig', 'disableStatelessSessionResumption', 'disableStatefulSessionResumption', 'sessionTimeout', 'ocspStaplePolicy', 'fullScanCertsOnSniMismatch'];

/** Envoy's ssl.* stats of a listener or cluster. */
export type SslStats = Record<'handshake' | 'connection_error' | 'no_certificate' | 'fail_verify_no_cert' | VerifyFailure, StatCounter>;

export function sslStats(stats: StatsStore, family: 'listener' | 'cluster', tag: { name: string; value: string }): SslStats {
  const c = (s: string) => stats.counter(statName(family, `ssl.${s}`, tag));
  return {
    handshake: c('handshake'),
    connection_error: c('connection_error'),
    no_certificate: c('no_certificate'),
    fail_verify_no_cert: c('fail_verify_no_cert'),
    fail_verify_error: c('fail_verify_error'),
    fail_verify_san: c('fail_verify_san'),
    fail_verify_cert_hash: c('fail_verify_cert_hash'),
  };
}

export class DownstreamTls {
  private readonly tls: CompiledTls;
  private readonly requireClientCert: boolean;
  private readonly requireSni: boolean;
  private server?: TlsServer;
  private built?: unknown;
  /** Connections in their handshake: the callback that serves each once it is done. */
  private readonly handshaking = new WeakMap<Socket, (s: TLSSocket) => void>();

  constructor(
    ctx: DownstreamTlsContext,
    field: string,
    secrets: SecretManager,
    private readonly stats: SslStats,
  ) {
    this.tls = compileCommonTls(ctx.commonTlsContext, field, 'server', secrets);
    this.requireClientCert = ctx.requireClientCertificate === true;
    this.requireSni = ctx.requireSni === true;
    const unapplied = unappliedFields(DownstreamTlsContextSchema, ctx, UNAPPLIED_DOWNSTREAM);
    if (unapplied.length > 0) log.warn(`${field}: accepted but not applied: ${unapplied.join(', ')}`);
    if (this.requireClientCert && !ctx.commonTlsContext?.validationContextType.case) {
      throw new ConfigError(`${field}.require_client_certificate`, 'needs a validation context (a trusted CA) to verify the client certificate with');
    }
  }

  /** Dynamic secret references of this context (listener warming waits for them). */
  get refs(): readonly SecretRef[] {
    return this.tls.refs;
  }

  /** Runs the handshake on `raw`; `serve` gets the decrypted stream of a verified connection. */
  handshake(raw: Socket, serve: (s: TLSSocket) => void): void {
    const server = this.currentServer();
    if (typeof server === 'string') {
      log.debug(`closing a TLS connection: ${server}`);
      this.stats.connection_error.inc();
      raw.destroy();
      return;
    }
    this.handshaking.set(raw, serve);
    // Bytes read by listener inspection (the ClientHello) are still buffered: node:tls reads them first.
    server.emit('connection', raw);
  }

  /**
   * The first of the context's protocols the client offers (server preference, as BoringSSL). With
   * none in common Envoy completes the handshake without ALPN, where node:tls would end it with
   * no_application_protocol; the client's first offer is accepted instead, so that a mesh client
   * offering only the mesh tokens (`mesh-peer-exchange`, `mesh`) still connects.
   */
  private readonly selectAlpn = ({ protocols }: { protocols: string[] }): string | undefined => this.tls.alpn.find((p) => protocols.includes(p)) ?? protocols[0];

  /** The TLS server with the context of the current secrets, or why there is none. */
  private currentServer(): TlsServer | string {
    const o = this.tls.options();
    if (typeof o === 'string') return o;
    if (this.server && this.built === o) return this.server;
    const requestCert = o.verifies || o.acceptUntrusted || o.checks.length > 0;
    const options = { ...o.context, requestCert, rejectUnauthorized: false, ...(this.tls.alpn.length ? { ALPNCallback: this.selectAlpn } : {}) };
    if (this.server) this.server.setSecureContext(options);
    else {
      this.server = new TlsServer(options);
      this.server.on('secureConnection', (s: TLSSocket) => this.secured(s));
      this.server.on('tlsClientError', (e: Error, s: TLSSocket) => {
        this.stats.connection_error.inc();
        log.debug(`TLS handshake from ${s.remoteAddress}:${s.remotePort} failed: ${e.message}`);
        s.destroy();
      });
    }
    this.built = o;
    return this.server;
  }

  private secured(s: TLSSocket): void {
    // node:tls keeps the socket it wrapped as _parent: the one the chain tracks.
    const raw = (s as TLSSocket & { _parent?: Socket })._parent;
    const serve = raw ? this.handshaking.get(raw) : undefined;
    if (!raw || !serve) {
      s.destroy();
      return;
    }
    this.handshaking.delete(raw);
    const refused = this.verify(s);
    if (refused) {
      this.stats[refused].inc();
      log.debug(`TLS connection from ${s.remoteAddress}:${s.remotePort} refused: ${refused}`);
      s.destroy();
      return;
    }
    this.stats.handshake.inc();
    inheritDestination(raw, s);
    inheritOriginalSrc(raw, s);
    serve(s);
  }

  /** Why the client is refused (its stat), or undefined; failures let through by ACCEPT_UNTRUSTED are counted here. */
  private verify(s: TLSSocket): keyof SslStats | undefined {
    const o = this.tls.options();
    if (typeof o === 'string') return 'connection_error';
    if (this.requireSni && !s.servername) return 'connection_error';
    const x509 = s.getPeerX509Certificate();
    if (!x509) {
      this.stats.no_certificate.inc();
      const required = this.requireClientCert || (o.checks.length > 0 && !o.acceptUntrusted);
      return required ? 'fail_verify_no_cert' : undefined;
    }
    if (!o.verifies && o.checks.length === 0) return undefined;
    const cert = peerCertOf(x509);
    const failed = o.verifies && !s.authorized ? 'fail_verify_error' : failedCheck(o, cert);
    if (!failed) {
      rememberPeer(s, cert);
      return undefined;
    }
    if (!o.acceptUntrusted) return failed;
    this.stats[failed].inc();
    return undefined;
  }
}
