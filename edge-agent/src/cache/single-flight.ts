// One piece of work per key at a time: callers asking for a key whose work
// runs get the same promise (a page fetch, a compression). The work must not
// reject: it resolves with what callers should fall back to.
export class SingleFlight<T> {
  private readonly running = new Map<string, Promise<T>>();

  run(key: string, work: () => Promise<T>): Promise<T> {
    let p = this.running.get(key);
    if (p === undefined) {
      p = work();
      this.running.set(key, p);
      void p.then(() => this.running.delete(key));
    }
    return p;
  }
}
