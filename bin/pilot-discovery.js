#!/usr/bin/env node
import { main } from '../dist/src/cli/runtime.js';
import { pilotDiscovery } from '../dist/src/cli/pilot-discovery.js';

main(pilotDiscovery);
