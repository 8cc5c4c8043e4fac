#!/usr/bin/env node
import { main } from '../dist/src/cli/runtime.js';
import { pilotAgent } from '../dist/src/cli/pilot-agent.js';

main(pilotAgent);
