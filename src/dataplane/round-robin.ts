// Round robin over a list, by weight: plain rotation when all weights are equal, else smooth
// weighted round robin (each entry gets its weight's share, interleaved, as nginx does). One state
// per list it is used on: a cluster's hosts, a priority level's localities, a locality's hosts.

export class RoundRobin {
  private next = 0;
  private current: number[] = [];

  pick<T>(items: readonly T[], weight: (item: T) => number, equal: boolean): T {
    if (equal) return items[this.next++ % items.length]!;
    if (this.current.length !== items.length) this.current = items.map(() => 0);
    let total = 0;
    let best = 0;
    items.forEach((item, i) => {
      const w = weight(item);
      this.current[i]! += w;
      total += w;
      if (this.current[i]! > this.current[best]!) best = i;
    });
    this.current[best]! -= total;
    return items[best]!;
  }
}

export const byWeight = (item: { readonly weight: number }): number => item.weight;
