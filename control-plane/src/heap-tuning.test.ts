// heap-tuning.ts: the control plane sets V8's old-generation growing factor
// unless its command line set one. Its effect on RSS is measured, not tested:
// bench/control-channel.ts, sustained purges to 1,000 agents.
import t from 'tap';
import { tuneHeap } from './heap-tuning.ts';

t.test('an operator\'s --heap-growing-percent on the command line wins', async (t) => {
  t.equal(tuneHeap(['--heap-growing-percent=50']), false);
  t.equal(tuneHeap(['--heap_growing_percent=50']), false);
  t.equal(tuneHeap(['--max-old-space-size=512']), true);
});
