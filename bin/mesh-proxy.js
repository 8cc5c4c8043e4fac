#!/usr/bin/env node
import { main } from '../dist/src/cli/main.js';
import { meshProxy } from '../dist/src/cli/mesh-proxy.js';

main(meshProxy);
