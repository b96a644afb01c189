//go:build !race

package asynctool

const raceEnabled = false
