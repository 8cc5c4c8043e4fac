// /etc/resolv.conf as the agent's DNS forwarder needs it: the upstream nameservers, the search
// domains (the app's resolver appends them; the agent uses the first to short-cut those queries),
// and the timeout and attempts options, with glibc's defaults and bounds.
import { isIP } from 'node:net';

export interface Upstream {
  readonly host: string;
  readonly port: number;
}

export interface ResolvConf {
  readonly servers: readonly Upstream[];
  readonly search: readonly string[];
  /** Per query and server, milliseconds (`options timeout:n`, seconds; default 5, at most 30). */
  readonly timeoutMs: number;
  /** Rounds over the servers (`options attempts:n`; default 2, at most 5). */
  readonly attempts: number;
}

export class ResolvConfError extends Error {}

function boundedOption(value: string, name: string, max: number, file: string): number {
  const n = Number(value);
  if (!Number.isInteger(n) || n < 0) throw new ResolvConfError(`${file}: options ${name}:${value}: expected a whole number`);
  return Math.min(Math.max(n, 1), max);
}

/** Parses resolv.conf text; unknown lines and options are ignored, as the C library does. */
export function parseResolvConf(text: string, file = 'resolv.conf'): ResolvConf {
  const servers: Upstream[] = [];
  let search: string[] = [];
  let timeoutS = 5;
  let attempts = 2;
  for (const raw of text.split('\n')) {
    const line = raw.replace(/[#;].*$/, '').trim();
    if (!line) continue;
    const [keyword, ...args] = line.split(/\s+/);
    if (keyword === 'nameserver') {
      const host = (args[0] ?? '').replace(/%.*$/, '');
      if (isIP(host) === 0) throw new ResolvConfError(`${file}: nameserver ${JSON.stringify(args[0] ?? '')}: expected an IP address`);
      servers.push({ host, port: 53 });
    } else if (keyword === 'search' || keyword === 'domain') {
      // The last of `search` and `domain` wins, as in glibc.
      search = args.map((d) => d.replace(/\.$/, '').toLowerCase()).filter(Boolean);
    } else if (keyword === 'options') {
      for (const opt of args) {
        const [name, value = ''] = opt.split(':');
        if (name === 'timeout') timeoutS = boundedOption(value, name, 30, file);
        if (name === 'attempts') attempts = boundedOption(value, name, 5, file);
      }
    }
  }
  return { servers, search, timeoutMs: timeoutS * 1000, attempts };
}
