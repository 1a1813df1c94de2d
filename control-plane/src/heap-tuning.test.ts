// heap-tuning.ts: the control plane sets V8's old-generation growing factor
// unless its command line set one, and its launchers cap the young generation. Its effect on RSS is measured, not tested:
// bench/control-channel.ts, sustained purges to 1,000 agents.
import { readFile } from 'node:fs/promises';
import t from 'tap';
import { tuneHeap, YOUNG_GENERATION_FLAG, youngGenerationCapped } from './heap-tuning.ts';

t.test('an operator\'s --heap-growing-percent on the command line wins', async (t) => {
  t.equal(tuneHeap(['--heap-growing-percent=50']), false);
  t.equal(tuneHeap(['--heap_growing_percent=50']), false);
  t.equal(tuneHeap(['--max-old-space-size=512']), true);
});

t.test('the young generation\'s cap is seen on the command line or in NODE_OPTIONS, whatever its value', async (t) => {
  t.equal(youngGenerationCapped([YOUNG_GENERATION_FLAG], ''), true);
  t.equal(youngGenerationCapped(['--max_semi_space_size=8'], ''), true, 'an operator\'s own value');
  t.equal(youngGenerationCapped([], '--enable-source-maps --max-semi-space-size=32'), true, 'NODE_OPTIONS');
  t.equal(youngGenerationCapped(['--max-old-space-size=512'], '--max-old-space-size=512'), false);
});

t.test('npm run control-plane passes the cap (package.json spells it out)', async (t) => {
  const manifest = JSON.parse(await readFile(new URL('../../package.json', import.meta.url), 'utf8')) as { scripts: Record<string, string> };
  t.match(manifest.scripts['control-plane'], new RegExp(`^exec node ${YOUNG_GENERATION_FLAG} control-plane/src/main\\.ts`));
});
