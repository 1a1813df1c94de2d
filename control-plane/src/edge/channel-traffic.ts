// Traffic reports (a feed of the session layer, channel-feed.ts): Welcome
// tells agents how often to send their per-endpoint rollups; the reports are
// accepted and dropped (nothing is buffered) until traffic analytics store
// them, which will be this feed's work.
import type { Feed, WelcomeFields } from './channel-feed.ts';

/** Told to agents in Welcome. */
export const TRAFFIC_REPORT_INTERVAL_MS = 60_000;

export class TrafficFeed implements Feed<undefined> {
  readonly name = 'traffic reports';
  readonly messages = ['trafficReport'] as const;

  attach(): undefined {
    return undefined;
  }

  welcome(): WelcomeFields {
    return { trafficReportIntervalMs: TRAFFIC_REPORT_INTERVAL_MS };
  }

  onMessage(): void {
    // Accepted and dropped until traffic analytics store them.
  }
}
