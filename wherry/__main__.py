from wherry.cli.entry import main

main()
