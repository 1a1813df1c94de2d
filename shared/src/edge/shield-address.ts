// The address an edge agent advertises for shielding (SHIELD_ADDRESS, sent in
// Hello): checked by the agent at start and by the control plane on Hello.
export function shieldAddressProblem(address: string): string | null {
  if (address === '') return null;
  if (address.length > 255) return 'at most 255 characters';
  const url = URL.parse(address);
  if (url === null || (url.protocol !== 'http:' && url.protocol !== 'https:') || url.hostname === '') return 'an http:// or https:// URL with a host';
  if (url.username !== '' || url.password !== '' || (url.pathname !== '/' && url.pathname !== '') || url.search !== '' || url.hash !== '') {
    return 'scheme, host and port only';
  }
  return null;
}
