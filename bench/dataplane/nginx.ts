// nginx (Debian), one worker, as a reverse proxy with keep-alive to the same app: the C proxy every
// bench/dataplane table is compared with, measured in the same run.
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { startChildServer, type ChildServer } from './child-server.js';

function config(dir: string, listen: number, app: number): string {
  const temp = (name: string) => `${name} ${join(dir, name.replace('_temp_path', ''))};`;
  return `worker_processes 1;
daemon off;
pid ${join(dir, 'nginx.pid')};
error_log ${join(dir, 'error.log')} warn;
events { worker_connections 1024; }
http {
  access_log off;
  ${['client_body_temp_path', 'proxy_temp_path', 'fastcgi_temp_path', 'uwsgi_temp_path', 'scgi_temp_path'].map(temp).join('\n  ')}
  upstream app { server 127.0.0.1:${app}; keepalive 32; }
  server {
    listen 127.0.0.1:${listen};
    location / {
      proxy_pass http://app;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
    }
  }
}
`;
}

export async function startNginx(listen: number, app: number): Promise<ChildServer> {
  const dir = mkdtempSync(join(tmpdir(), 'bench-nginx-'));
  writeFileSync(join(dir, 'nginx.conf'), config(dir, listen, app));
  return startChildServer({
    name: 'nginx',
    command: 'nginx',
    args: ['-p', dir, '-c', join(dir, 'nginx.conf')],
    ready: `http://127.0.0.1:${listen}/ip`,
    hint: "install Debian's nginx-light",
    stopSignal: 'SIGQUIT',
  });
}
