// The HTTP client behind `request` and `wait`: one call, a bounded time, and errors a user can read
// ("connection refused at ...") instead of a stack trace.
import { UsageError } from './command.js';

export interface HttpResult {
  status: number;
  body: string;
}

/** Why a request failed, from the error chain fetch gives (cause.code is ECONNREFUSED etc.). */
export function describeFailure(e: unknown): string {
  const cause = (e as { cause?: { code?: string; message?: string } }).cause;
  if (cause?.code === 'ECONNREFUSED') return 'connection refused';
  if (cause?.code === 'ENOTFOUND') return 'host not found';
  if ((e as Error).name === 'TimeoutError') return 'timed out';
  return cause?.message ?? (e as Error).message;
}

export async function httpRequest(base: string, method: string, path: string, body?: string, timeoutMs = 30_000): Promise<HttpResult> {
  const m = method.toUpperCase();
  if (!/^[A-Z]+$/.test(m)) throw new UsageError(`invalid method "${method}": expected an HTTP method such as GET or POST`);
  const url = new URL(path.startsWith('/') ? path : `/${path}`, base);
  try {
    const res = await fetch(url, {
      method: m,
      signal: AbortSignal.timeout(timeoutMs),
      ...(body !== undefined && m !== 'GET' && m !== 'HEAD' ? { body } : {}),
    });
    return { status: res.status, body: await res.text() };
  } catch (e) {
    throw new UsageError(`${m} ${url.href} failed: ${describeFailure(e)}`);
  }
}
