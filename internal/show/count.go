package show

import (
	"fmt"
)

// Count says n of a thing in words with the right plural: "1 process",
// "2 processes", "1 child", "3 children".
func Count(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return fmt.Sprintf("%d %s", n, many)
}
