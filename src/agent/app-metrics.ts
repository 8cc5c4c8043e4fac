// Whether and where the agent scrapes the application for the merged metrics on 15020: the pod's
// `prometheus.io/scrape|port|path` annotations. The injector moves them into MESH_METRICS_ANNOTATIONS
// (JSON with the keys stripped of `prometheus.io/`, as the Go mesh's ISTIO_PROMETHEUS_ANNOTATIONS)
// because it points the pod's own annotations at the agent; without it the downward-API
// annotations file is read.

export interface AppScrape {
  port: number;
  /** Default `/metrics`, as Prometheus's. */
  path: string;
}

export class AppMetricsConfigError extends Error {}

const PREFIX = 'prometheus.io/';

/**
 * The application scrape from the variable (JSON object of strings, keys `scrape`, `port`, `path`)
 * or, when it is empty, from the annotations. undefined = do not scrape (scrape is not "true").
 */
export function appScrapeConfig(variable: string, annotations: Readonly<Record<string, string>>): AppScrape | undefined {
  let keys: Record<string, string>;
  let source: string;
  if (variable.trim() !== '') {
    source = 'MESH_METRICS_ANNOTATIONS';
    let doc: unknown;
    try {
      doc = JSON.parse(variable);
    } catch (e) {
      throw new AppMetricsConfigError(`MESH_METRICS_ANNOTATIONS: not valid JSON: ${(e as Error).message}`);
    }
    if (typeof doc !== 'object' || doc === null || Array.isArray(doc) || Object.values(doc).some((v) => typeof v !== 'string')) {
      throw new AppMetricsConfigError('MESH_METRICS_ANNOTATIONS: expected a JSON object of strings, e.g. {"scrape":"true","port":"8080","path":"/metrics"}');
    }
    keys = doc as Record<string, string>;
  } else {
    source = 'annotation prometheus.io/port';
    keys = Object.fromEntries(Object.entries(annotations).filter(([k]) => k.startsWith(PREFIX)).map(([k, v]) => [k.slice(PREFIX.length), v]));
  }
  if (keys['scrape'] !== 'true') return undefined;
  const portText = keys['port'] ?? '';
  const port = Number(portText);
  if (!/^\d+$/.test(portText) || port < 1 || port > 65535) {
    throw new AppMetricsConfigError(`${source}: port ${JSON.stringify(portText)} is not a port number (1-65535); the application's metrics need one`);
  }
  const path = keys['path'] || '/metrics';
  return { port, path: path.startsWith('/') ? path : `/${path}` };
}
