// The sample external authorizers (HTTP, and gRPC envoy.service.auth.v3.Authorization), deciding by
// the request's `x-ext-authz` header as the production mesh's sample authorizer does: `allow` allows
// (adding `x-ext-authz-check-result: allowed` for the upstream and `x-ext-authz-to-client: allowed`
// for the client's response), `fail` answers an error, `hang` never answers, anything else denies
// with a custom status, body and header. Every check is recorded. Tests start them in their own
// process (`node dist/samples/apps/ext-authz.js`) or in the test's.
import { createServer, type IncomingHttpHeaders, type Server as HttpServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { create } from '@bufbuild/protobuf';
import { Server, ServerCredentials, status as grpcStatus, type sendUnaryData, type ServerUnaryCall } from '@grpc/grpc-js';
import { Authorization, CheckResponseSchema, type CheckRequest, type CheckResponse } from '../../src/gen/envoy/service/auth/v3/external_auth_pb.js';
import { grpcServiceDefinition } from '../../src/envoy/grpc-service.js';

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

/** Every check as one line, for a test reading the authorizer process's output. */
export type CheckListener = (line: string) => void;

/** The HTTP authorizer: allow -> 200, fail -> 500, hang -> no answer, else 401 with body and header. */
export async function startHttpAuthorizer(port = 0, onCheck?: CheckListener): Promise<Authorizer<HttpCheck>> {
  const checks: HttpCheck[] = [];
  const server = createServer((req, res) => {
    checks.push({ method: req.method ?? '', url: req.url ?? '', headers: req.headers });
    onCheck?.(`check http ${req.method} ${req.url}`);
    const verdict = req.headers['x-ext-authz'];
    if (verdict === 'hang') return;
    if (verdict === 'allow') {
      res.writeHead(200, { 'x-ext-authz-check-result': 'allowed', 'x-not-for-upstream': 'secret', 'x-ext-authz-to-client': 'allowed' }).end();
    } else if (verdict === 'fail') {
      res.writeHead(500).end('authorizer broken');
    } else {
      res.writeHead(401, { 'x-ext-authz-check-result': 'denied', 'x-not-for-client': 'internal', 'content-type': 'text/plain' }).end(`denied by ext_authz for ${req.url}`);
    }
  });
  const bound = await new Promise<number>((ok, fail) => {
    server.once('error', fail);
    server.listen(port, '127.0.0.1', () => ok((server.address() as AddressInfo).port));
  });
  return { port: bound, checks, close: () => closeHttp(server) };
}

function closeHttp(server: HttpServer): Promise<void> {
  server.closeAllConnections();
  return new Promise((ok) => server.close(() => ok()));
}

/** The gRPC Authorization server: allow -> OK with header mutations, fail -> UNAVAILABLE, hang -> none, else PERMISSION_DENIED + denied_response. */
export async function startGrpcAuthorizer(port = 0, onCheck?: CheckListener): Promise<Authorizer<CheckRequest>> {
  const checks: CheckRequest[] = [];
  const server = new Server();
  server.addService(grpcServiceDefinition(Authorization) as never, {
    check(call: ServerUnaryCall<CheckRequest, CheckResponse>, cb: sendUnaryData<CheckResponse>) {
      checks.push(call.request);
      onCheck?.(`check grpc ${call.request.attributes?.request?.http?.method} ${call.request.attributes?.request?.http?.path}`);
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
              value: {
                headers: [{ header: { key: 'x-ext-authz-check-result', value: 'allowed' } }],
                headersToRemove: ['x-remove-me'],
                responseHeadersToAdd: [{ header: { key: 'x-ext-authz-to-client', value: 'allowed' } }],
              },
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
  const bound = await new Promise<number>((ok, fail) => server.bindAsync(`127.0.0.1:${port}`, ServerCredentials.createInsecure(), (e, p) => (e ? fail(e) : ok(p))));
  // forceShutdown: a "hang" call would keep a graceful shutdown waiting forever.
  return { port: bound, checks, close: async () => server.forceShutdown() };
}

// `node dist/samples/apps/ext-authz.js [httpPort] [grpcPort]`: both authorizers on 127.0.0.1 (0 = any
// free port), announced as `ext-authz http=<port> grpc=<port>`, then one line per check.
if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const [httpPort = '0', grpcPort = '0'] = process.argv.slice(2);
  const log = (line: string) => console.log(line);
  Promise.all([startHttpAuthorizer(Number(httpPort), log), startGrpcAuthorizer(Number(grpcPort), log)]).then(
    ([h, g]) => console.log(`ext-authz http=${h.port} grpc=${g.port}`),
    (e: Error) => {
      console.error(`ext-authz: cannot listen: ${e.message}`);
      process.exit(1);
    },
  );
}
