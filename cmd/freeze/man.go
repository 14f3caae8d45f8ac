package main

import (
	"freeze/internal/manual"
	"freeze/internal/order"
	"freeze/internal/version"
	"freeze/runbooks"
)

// book is freeze's manual: the man page and the completions, made from
// the usage texts --help prints.
func book() manual.Book {
	var names []string
	for _, r := range runbooks.List() {
		names = append(names, r[0])
	}
	return manual.Book{Commands: order.Commands, Usage: usageOf, Runbooks: names, Version: version.Get().Version}
}
