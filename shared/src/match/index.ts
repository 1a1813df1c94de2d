export { compilePathGlob, compilePathGlobs, globLiteralPrefix, type PathMatcher } from './glob.ts';
export { compileHostPattern, compileHostPatterns, normalizeHost, type HostMatcher } from './host.ts';
export { compileCidr, isValidCidr, isPrivateAddress, parseAddress, type CidrMatcher, type Address } from './cidr.ts';
