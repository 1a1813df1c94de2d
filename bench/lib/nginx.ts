// nginx as the edge benchmarks run it: Debian's binary, a configuration of its
// own under a prefix directory (pid, error log, temporary files there), one
// proxy_cache zone, access log off, sendfile on.
import { have } from './cli.ts';

export const nginxBin = (): string => (have('nginx') ? 'nginx' : '/usr/sbin/nginx');

/** nginx.conf text: `workers` worker processes, the cache zone's proxy_cache_path parameters, and the servers given. */
export function nginxConf(dir: string, workers: number, cachePath: string, servers: string): string {
  return `
worker_processes ${workers};
daemon off;
user root;
pid ${dir}/nginx.pid;
error_log ${dir}/nginx-error.log warn;
events { worker_connections 1024; }
http {
  access_log off;
  sendfile on;
  tcp_nodelay on;
  keepalive_requests 100000;
  proxy_cache_path ${cachePath} use_temp_path=off;
  client_body_temp_path ${dir}/nginx-body; proxy_temp_path ${dir}/nginx-proxy; fastcgi_temp_path ${dir}/nginx-fcgi; uwsgi_temp_path ${dir}/nginx-uwsgi; scgi_temp_path ${dir}/nginx-scgi;
${servers}
}
`;
}
