// This directory is the TypeScript processor example. The go.mod makes it
// a module of its own, so that ./... in the repository never walks into
// node_modules (the Temporal SDK ships Go tools there).
module github.com/spiderpool/spiderpool/examples/shop-ts

go 1.23
