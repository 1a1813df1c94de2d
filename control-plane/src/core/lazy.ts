// A library loaded on its first use and kept: the heavy ones only some
// requests need (image decoding, certificate signing, ACME) stay out of
// the process's memory until then (docs/decisions.md: "Control-channel benchmark,
// real path", RSS).

/** `load` runs once, on the first call; a failed load runs again on the next. */
export function lazy<T>(load: () => Promise<T>): () => Promise<T> {
  let loading: Promise<T> | undefined;
  return () => (loading ??= load().catch((error: unknown) => {
    loading = undefined;
    throw error;
  }));
}
