// Header mutations of a route configuration, virtual host and route (request_headers_to_add /
// _remove, response_headers_to_add / _remove): compiled once, applied per request in Envoy's
// order with Envoy's append actions.
import type { HeaderValueOption } from '../gen/envoy/config/core/v3/base_pb.js';
import { HeaderValueOption_HeaderAppendAction } from '../gen/envoy/config/core/v3/base_pb.js';
import { ConfigError } from '../envoy/config-error.js';

/** Adds/removes headers; applied in the order route config -> virtual host -> route, like Envoy. */
export interface HeaderMutation {
  readonly remove: readonly string[];
  readonly add: readonly { name: string; value: string; action: HeaderValueOption_HeaderAppendAction }[];
}

/** The minimal header surface a mutation needs, satisfied by RequestHeaders and response maps. */
export interface MutableHeaders {
  has(name: string): boolean;
  add(name: string, value: string): void;
  set(name: string, value: string): void;
  remove(name: string): void;
}

export function compileMutation(add: readonly HeaderValueOption[], remove: readonly string[], field: string): HeaderMutation {
  return {
    remove: remove.map((r) => r.toLowerCase()),
    add: add.map((o, i) => {
      if (!o.header?.key) throw new ConfigError(`${field}[${i}].header.key`, 'a header name is required');
      // The deprecated `append` flag, when set, wins over append_action (false = overwrite).
      const action =
        o.append === undefined
          ? o.appendAction
          : o.append
            ? HeaderValueOption_HeaderAppendAction.APPEND_IF_EXISTS_OR_ADD
            : HeaderValueOption_HeaderAppendAction.OVERWRITE_IF_EXISTS_OR_ADD;
      return { name: o.header.key.toLowerCase(), value: o.header.value, action };
    }),
  };
}

/** A plain header record (node's header objects, a tunnel's request headers) as a mutable header set. */
export class HeaderRecord implements MutableHeaders {
  constructor(readonly h: Record<string, string | string[]>) {}
  has(name: string): boolean {
    return this.h[name] !== undefined;
  }
  add(name: string, value: string): void {
    const cur = this.h[name];
    this.h[name] = cur === undefined ? value : [...(Array.isArray(cur) ? cur : [cur]), value];
  }
  set(name: string, value: string): void {
    this.h[name] = value;
  }
  remove(name: string): void {
    delete this.h[name];
  }
}

/** Applies mutations in order. Values are literal: Envoy's %VARIABLE% substitution is not supported. */
export function applyMutations(headers: MutableHeaders, mutations: readonly HeaderMutation[]): void {
  for (const m of mutations) {
    for (const r of m.remove) headers.remove(r);
    for (const a of m.add) {
      const exists = headers.has(a.name);
      switch (a.action) {
        case HeaderValueOption_HeaderAppendAction.APPEND_IF_EXISTS_OR_ADD:
          headers.add(a.name, a.value);
          break;
        case HeaderValueOption_HeaderAppendAction.ADD_IF_ABSENT:
          if (!exists) headers.add(a.name, a.value);
          break;
        case HeaderValueOption_HeaderAppendAction.OVERWRITE_IF_EXISTS_OR_ADD:
          headers.set(a.name, a.value);
          break;
        case HeaderValueOption_HeaderAppendAction.OVERWRITE_IF_EXISTS:
          if (exists) headers.set(a.name, a.value);
          break;
      }
    }
  }
}
