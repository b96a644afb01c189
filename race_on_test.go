//go:build race

package asynctool

const raceEnabled = true
