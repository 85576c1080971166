from pacer_reconciler.main import main

main()
