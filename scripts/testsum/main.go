package main

import (
	"flag"
	"fmt"
	"io"
	"os"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	code := 0
	switch os.Args[1] {
	case "stream":
		code, err = runStream(os.Args[2:])
	case "report":
		code, err = runReport(os.Args[2:])
	case "fuzzrace":
		code, err = runFuzzRace(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "testsum: %v\n", err)
		os.Exit(2)
	}
	os.Exit(code)
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: testsum stream -out FILE | report -steps FILE -allow FILE | fuzzrace FILE")
	os.Exit(2)
}

// runStream copies go test -json from stdin to -out (appending) and
// prints the compact log. It always exits 0: the step's result is go
// test's exit code, which scripts/test.sh takes from the pipe.
func runStream(args []string) (int, error) {
	fs := flag.NewFlagSet("stream", flag.ExitOnError)
	out := fs.String("out", "", "append the raw events to this file")
	fs.Parse(args)
	var tee io.Writer
	if *out != "" {
		f, err := os.OpenFile(*out, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return 0, err
		}
		defer f.Close()
		tee = f
	}
	return 0, newCollector(os.Stdout).read(os.Stdin, tee)
}

func runReport(args []string) (int, error) {
	fs := flag.NewFlagSet("report", flag.ExitOnError)
	stepsFile := fs.String("steps", "", "the steps file scripts/test.sh wrote")
	allowFile := fs.String("allow", "", "the skip allow-list (test/skips.txt)")
	fs.Parse(args)
	steps, err := readSteps(*stepsFile)
	if err != nil {
		return 0, err
	}
	f, err := os.Open(*allowFile)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	allow, err := readAllowList(f, *allowFile)
	if err != nil {
		return 0, err
	}
	sum, err := report(os.Stdout, steps, allow)
	if err != nil {
		return 0, err
	}
	if sum.failed > 0 {
		return 1, nil
	}
	return 0, nil
}

// runFuzzRace exits 0 when FILE's failures are exactly the fuzz
// coordinator race, 1 otherwise.
func runFuzzRace(args []string) (int, error) {
	if len(args) != 1 {
		usage()
	}
	res, err := readEvents(args[0])
	if err != nil {
		return 0, err
	}
	if fuzzRace(res) {
		return 0, nil
	}
	return 1, nil
}
