// The wall clock the cache and the request path read (milliseconds since the
// epoch): how old a stored object is, when a purge marked it stale, when an
// origin answered. An agent is given one (EdgeAgentOptions.clock); tests give
// a clock they move forward instead of sleeping through a freshness lifetime.
export type Clock = () => number;

export const systemClock: Clock = Date.now;
