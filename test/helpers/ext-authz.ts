// Real external authorizers on loopback for the ext_authz tests, deciding by the request's
// `x-ext-authz` header as the production mesh's sample authorizer does: `allow` allows (and adds
// `x-ext-authz-check-result: allowed` for the upstream), `fail` answers an error, `hang` never
// answers, anything else denies with a custom status, body and header. Every check is recorded.
import { createServer, type IncomingHttpHeaders } from 'node:http';
import { create } from '@bufbuild/protobuf';
import { Server, ServerCredentials, status as grpcStatus, type sendUnaryData, type ServerUnaryCall } from '@grpc/grpc-js';
import { Authorization, CheckResponseSchema, type CheckRequest, type CheckResponse } from '../../src/gen/envoy/service/auth/v3/external_auth_pb.js';
import { grpcServiceDefinition } from '../../src/envoy/grpc-service.js';
import { close, listen } from './http.js';

export interface HttpCheck {
  readonly method: string;
  readonly url: string;
  readonly headers: IncomingHttpHeaders;
}

export interface Authorizer<C> {
  readonly port: number;
  readonly checks: C[];
  close(): Promise<void>;
}

/** The HTTP authorizer: allow -> 200, fail -> 500, hang -> no answer, else 401 with body and header. */
export async function startHttpAuthorizer(): Promise<Authorizer<HttpCheck>> {
  const checks: HttpCheck[] = [];
  const server = createServer((req, res) => {
    checks.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers });
    const verdict = req.headers['x-ext-authz'];
    if (verdict === 'hang') return;
    if (verdict === 'allow') {
      res.writeHead(200, { 'x-ext-authz-check-result': 'allowed', 'x-not-for-upstream': 'secret' }).end();
    } else if (verdict === 'fail') {
      res.writeHead(500).end('authorizer broken');
    } else {
      res.writeHead(401, { 'x-ext-authz-check-result': 'denied', 'x-not-for-client': 'internal', 'content-type': 'text/plain' }).end(`denied by ext_authz for ${req.url}`);
    }
  });
  const port = await listen(server);
  return { port, checks, close: () => close(server) };
}

/** The gRPC Authorization server: allow -> OK with header mutations, fail -> UNAVAILABLE, hang -> none, else PERMISSION_DENIED + denied_response. */
export async function startGrpcAuthorizer(): Promise<Authorizer<CheckRequest>> {
  const checks: CheckRequest[] = [];
  const server = new Server();
  server.addService(grpcServiceDefinition(Authorization) as never, {
    check(call: ServerUnaryCall<CheckRequest, CheckResponse>, cb: sendUnaryData<CheckResponse>) {
      checks.push(call.request);
      const verdict = call.request.attributes?.request?.http?.headers['x-ext-authz'];
      if (verdict === 'hang') return;
      if (verdict === 'fail') return cb({ code: grpcStatus.UNAVAILABLE, details: 'authorizer broken' });
      if (verdict === 'allow') {
        return cb(
          null,
          create(CheckResponseSchema, {
            status: { code: 0 },
            httpResponse: {
              case: 'okResponse',
              value: { headers: [{ header: { key: 'x-ext-authz-check-result', value: 'allowed' } }], headersToRemove: ['x-remove-me'] },
            },
          }),
        );
      }
      cb(
        null,
        create(CheckResponseSchema, {
          status: { code: grpcStatus.PERMISSION_DENIED },
          httpResponse: {
            case: 'deniedResponse',
            value: { status: { code: 401 }, body: `denied by grpc ext_authz for ${call.request.attributes?.request?.http?.path}`, headers: [{ header: { key: 'x-ext-authz-check-result', value: 'denied' } }] },
          },
        }),
      );
    },
  });
  const port = await new Promise<number>((resolve, reject) => server.bindAsync('127.0.0.1:0', ServerCredentials.createInsecure(), (e, p) => (e ? reject(e) : resolve(p))));
  // forceShutdown: a "hang" call would keep a graceful shutdown waiting forever.
  return { port, checks, close: async () => server.forceShutdown() };
}
