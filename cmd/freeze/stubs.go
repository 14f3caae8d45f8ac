package main

const hiddenChain = "__chain"

func runDrill(o out, args []string) int    { o.errorf("drill: not built yet"); return exitUsage }
func runRunbook(o out, args []string) int  { o.errorf("runbook: not built yet"); return exitUsage }
func runTimeline(o out, args []string) int { o.errorf("timeline: not built yet"); return exitUsage }
func runChainFixture(args []string) int    { return exitUsage }
