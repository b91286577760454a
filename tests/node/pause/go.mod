module agentcard.dev/node/pause

go 1.25.0
