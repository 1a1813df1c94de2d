import { pino, type Logger } from 'pino';

export function createLogger(level: string, name = 'control-plane'): Logger {
  return pino({
    name,
    level,
    // Credentials never reach the log, wherever they appear.
    redact: {
      paths: ['req.headers.authorization', 'req.headers.cookie', 'res.headers["set-cookie"]', '*.password', '*.token', '*.secret', '*.refresh_token', '*.access_token'],
      censor: '[redacted]',
    },
    base: { service: name },
    timestamp: pino.stdTimeFunctions.isoTime,
  });
}
