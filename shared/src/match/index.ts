export { compilePathGlob, compilePathGlobs, globLiteralPrefix, pathGlobProblem, type PathMatcher } from './glob.ts';
export { compileHostPattern, compileHostPatterns, hostPatternProblem, normalizeHost, type HostMatcher } from './host.ts';
export { formatAuthority, parseAuthority, type Authority } from './authority.ts';
export { normalizePath } from './path.ts';
export { addressClass, compileCidr, isValidCidr, isPrivateAddress, originAddressAllowed, parseAddress, type AddressClass, type CidrMatcher, type Address } from './cidr.ts';
