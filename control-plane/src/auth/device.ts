// What a session list shows about a login: a coarse device type and platform
// from the User-Agent, and a masked client address (a hint, not the address).
import net from 'node:net';

const smartTv = /SmartTV|SMART-TV|Tizen|Web0S|webOS|BRAVIA|Roku|AFT[A-Z]|CrKey|HbbTV|AppleTV|tvOS|GoogleTV|Android TV/i;

export function deviceTypeFromUserAgent(ua: string): string {
  if (!ua) return 'unknown';
  if (smartTv.test(ua)) return 'smart_tv';
  if (/PlayStation|Xbox|Nintendo/i.test(ua)) return 'game_console';
  if (/iPad|Tablet/i.test(ua) || (/Android/i.test(ua) && !/Mobile/i.test(ua))) return 'tablet';
  if (/Mobile|iPhone|Android/i.test(ua)) return 'mobile';
  if (/Mozilla|Chrome|Safari|Firefox|Edg\//i.test(ua)) return 'desktop';
  return 'other';
}

export function platformFromUserAgent(ua: string): string | null {
  const checks: [RegExp, string][] = [
    [/tvOS|AppleTV/i, 'tvOS'], [/Tizen/i, 'Tizen'], [/Web0S|webOS/i, 'webOS'], [/Roku/i, 'Roku'],
    [/AFT[A-Z]/, 'Fire TV'], [/Android TV|GoogleTV/i, 'Android TV'],
    [/iPhone|iPad|iOS/i, 'iOS'], [/Android/i, 'Android'], [/Windows/i, 'Windows'],
    [/Mac OS X|Macintosh/i, 'macOS'], [/CrOS/i, 'ChromeOS'], [/Linux/i, 'Linux'],
  ];
  for (const [pattern, name] of checks) if (pattern.test(ua)) return name;
  return null;
}

/** 203.0.113.7 → 203.0.113.x; IPv6 keeps its first three groups. */
export function maskIp(ip: string): string | null {
  if (!ip) return null;
  const v4 = ip.startsWith('::ffff:') ? ip.slice(7) : ip;
  if (net.isIPv4(v4)) return v4.split('.').slice(0, 3).join('.') + '.x';
  if (net.isIPv6(ip)) return ip.split(':').slice(0, 3).join(':') + ':…';
  return null;
}
