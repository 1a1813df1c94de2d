import t from 'tap';
import { agentPorts } from './dev-ports.ts';

t.test('npm start: without their flags, the agent\'s HTTPS and metrics ports follow --http-port, so a second start collides on none', async (t) => {
  t.same(agentPorts({}), { http: 8090, https: 8443, metrics: 9091 }, 'the defaults');
  t.same(agentPorts({ HTTP_PORT: '9090' }), { http: 9090, https: 9443, metrics: 10091 });
  t.same(agentPorts({ HTTP_PORT: '9090', HTTPS_PORT: '7443', METRICS_PORT: '7091' }), { http: 9090, https: 7443, metrics: 7091 }, 'a flag wins');
  t.same(agentPorts({ HTTP_PORT: '65000' }), { http: 65000, https: 65353, metrics: 9091 }, 'a port past 65535 falls back to its default');
});
