// Addresses for ServiceEntries that have none (DNS_AUTO_ALLOCATE), as the Go mesh allocates them:
// from the class E range 240.240.0.0/16, which no real network routes, so an application that
// resolves the host through the agent connects to an address only the sidecar's listeners know.
//
// The allocation is a pure function of the service list: a host's address is the slot its name
// hashes to, so it stays the same across pushes and restarts whatever else changes, unless another
// host hashed to the same slot earlier in hostname order (then the next free slot, deterministically).
// Addresses users wrote in the range are never handed out again.
import type { Service } from './service.js';

export const AUTO_ALLOCATE_CIDR = '240.240.0.0/16';

// Last octets 0 and 255 are skipped (network and broadcast look-alikes that some stacks refuse).
const PER_THIRD_OCTET = 254;
const SLOTS = 256 * PER_THIRD_OCTET;

function slotAddress(slot: number): string {
  return `240.240.${Math.floor(slot / PER_THIRD_OCTET)}.${(slot % PER_THIRD_OCTET) + 1}`;
}

function addressSlot(address: string): number | undefined {
  const m = /^240\.240\.(\d{1,3})\.(\d{1,3})$/.exec(address);
  if (!m) return undefined;
  const third = Number(m[1]);
  const fourth = Number(m[2]);
  if (third > 255 || fourth < 1 || fourth > PER_THIRD_OCTET) return undefined;
  return third * PER_THIRD_OCTET + fourth - 1;
}

/** FNV-1a, 32 bits: cheap, well spread over short strings, and the same on every machine. */
function fnv1a(text: string): number {
  let h = 0x811c9dc5;
  for (const byte of Buffer.from(text, 'utf8')) {
    h ^= byte;
    h = Math.imul(h, 0x01000193) >>> 0;
  }
  return h;
}

/**
 * Whether the service gets an auto-allocated address: it has no address of its own, its host is not
 * a wildcard (no single address could stand for it), and the proxy resolves or knows its endpoints
 * (resolution NONE means "to wherever the client connected", so a made-up address would break it).
 */
export function needsAutoAllocation(s: Service): boolean {
  return s.addresses.length === 0 && !s.hostname.startsWith('*') && s.resolution !== 'NONE';
}

/** hostname -> allocated IPv4 address, for every service that needs one. Same host, same address. */
export function allocateAddresses(services: readonly Service[]): ReadonlyMap<string, string> {
  const taken = new Set<number>();
  for (const s of services) {
    for (const a of s.addresses) {
      const slot = addressSlot(a);
      if (slot !== undefined) taken.add(slot);
    }
  }
  const hosts = [...new Set(services.filter(needsAutoAllocation).map((s) => s.hostname))].sort();
  const out = new Map<string, string>();
  for (const host of hosts) {
    if (taken.size >= SLOTS) break;
    let slot = fnv1a(host) % SLOTS;
    while (taken.has(slot)) slot = (slot + 1) % SLOTS;
    taken.add(slot);
    out.set(host, slotAddress(slot));
  }
  return out;
}

const perSnapshot = new WeakMap<object, ReadonlyMap<string, string>>();

/** allocateAddresses over a snapshot's services, once per snapshot (snapshots are immutable). */
export function allocatedFor(push: { readonly services: readonly Service[] }): ReadonlyMap<string, string> {
  let m = perSnapshot.get(push);
  if (!m) perSnapshot.set(push, (m = allocateAddresses(push.services)));
  return m;
}

/** The services as a proxy that takes auto-allocated addresses sees them: those addresses filled in. */
export function withAllocatedAddresses(services: readonly Service[], allocated: ReadonlyMap<string, string>): Service[] {
  return services.map((s) => {
    const a = needsAutoAllocation(s) ? allocated.get(s.hostname) : undefined;
    return a ? { ...s, addresses: [a] } : s;
  });
}
