import { pino, type DestinationStream, type Logger } from 'pino';

/** `destination`: where lines go (standard output by default; tests collect them). */
export function createLogger(level: string, name = 'control-plane', destination?: DestinationStream): Logger {
  const options = {
    name,
    level,
    // Credentials never reach the log, wherever they appear.
    redact: {
      paths: ['req.headers.authorization', 'req.headers.cookie', 'res.headers["set-cookie"]', '*.password', '*.token', '*.secret', '*.refresh_token', '*.access_token'],
      censor: '[redacted]',
    },
    base: { service: name },
    timestamp: pino.stdTimeFunctions.isoTime,
  };
  return destination ? pino(options, destination) : pino(options);
}
