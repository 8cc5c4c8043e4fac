// CPU profiles of benchmark steps, taken in-process through the inspector: one .cpuprofile per step
// (open it in Chrome DevTools, or summarize it with profile-summary.ts).
import { writeFileSync, mkdirSync } from 'node:fs';
import { Session } from 'node:inspector/promises';
import { join } from 'node:path';

export class StepProfiler {
  private seq = 0;

  private constructor(
    private readonly session: Session,
    private readonly dir: string,
  ) {}

  static async start(dir: string): Promise<StepProfiler> {
    mkdirSync(dir, { recursive: true });
    const session = new Session();
    session.connect();
    await session.post('Profiler.enable');
    await session.post('Profiler.setSamplingInterval', { interval: 1000 });
    return new StepProfiler(session, dir);
  }

  begin(): Promise<void> {
    return this.session.post('Profiler.start');
  }

  /** Stops the step's profile and writes it as `<n>-<label>.cpuprofile`; returns the file. */
  async end(label: string): Promise<string> {
    const { profile } = await this.session.post('Profiler.stop');
    const file = join(this.dir, `${++this.seq}-${label.replace(/[^A-Za-z0-9]+/g, '-').replace(/^-|-$/g, '')}.cpuprofile`);
    writeFileSync(file, JSON.stringify(profile));
    return file;
  }

  async stop(): Promise<void> {
    await this.session.post('Profiler.disable');
    this.session.disconnect();
  }
}
