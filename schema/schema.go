// Package schema holds spiderpool's Postgres schema as numbered migrations,
// embedded in the binary so `spiderpool migrate` (also run by every node at
// start) needs no files beside it.
//
// A migration is NNNN_name.sql and runs in one transaction. Never edit one
// that has shipped; add the next number.
package schema

import "embed"

// Migrations holds migrations/NNNN_name.sql.
//
//go:embed migrations/*.sql
var Migrations embed.FS
